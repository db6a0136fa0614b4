"""Row log-softmax over the last dimension (the task's dim=1 of a 2-D input). Rows that fit one block are
read once; longer rows use an online log-sum-exp pass, then a pass writing x - logsumexp."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 16384


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, SINGLE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        lse = tl.log(tl.sum(tl.exp(shifted), axis=0))
        tl.store(y_row + offs, (shifted - lse).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        run_max = tl.full((BLOCK,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            new_max = tl.maximum(run_max, x)
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
            run_max = new_max
        row_max = tl.max(run_max, axis=0)
        lse = row_max + tl.log(tl.sum(run_sum * tl.exp(run_max - row_max), axis=0))
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x - lse).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"log_softmax over dim 1 expects a 2-D input, got shape {tuple(x.shape)}")
        x = x.contiguous()
        n_cols = x.shape[1]
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
        log_softmax_kernel[(x.shape[0],)](
            x, y, n_cols, BLOCK=block, SINGLE_BLOCK=n_cols <= block, num_warps=num_warps
        )
        return y
