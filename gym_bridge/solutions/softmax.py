"""Row softmax. Rows that fit one block are read once and kept in registers; longer rows use an online
(running max, rescaled sum) first pass and a second normalizing pass."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 16384


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, SINGLE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        run_max = tl.full((BLOCK,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            new_max = tl.maximum(run_max, x)
            # The first block always fills every lane (rows here are longer than BLOCK), so new_max is finite.
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
            run_max = new_max
        row_max = tl.max(run_max, axis=0)
        denom = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - row_max) / denom).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
        softmax_kernel[(x.numel() // n_cols,)](
            x, y, n_cols, BLOCK=block, SINGLE_BLOCK=n_cols <= block, num_warps=num_warps
        )
        return y
