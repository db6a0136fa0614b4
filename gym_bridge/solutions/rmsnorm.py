"""RMSNorm: mean of squares in float32, scaled by the weight, rounded once to the input dtype.
Rows that fit one block are read once; longer rows read twice (statistics, then write)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 8192


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, SINGLE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
        rmsnorm_kernel[(x.numel() // n_cols,)](
            x, self.weight, y, n_cols, float(self.eps), BLOCK=block, SINGLE_BLOCK=n_cols <= block, num_warps=num_warps
        )
        return y
