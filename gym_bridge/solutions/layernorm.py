"""LayerNorm over the last dimension. Rows that fit one block are normalized from registers in one read;
longer rows take three passes (mean, centred variance, write) to keep the variance exact."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 8192


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr, SINGLE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    if SINGLE_BLOCK:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        centred = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / n_cols
        acc = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            centred = tl.where(mask, x - mean, 0.0)
            acc += centred * centred
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same module (and attribute name) as the reference so parameters match under one seed and state_dicts load.
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
        layernorm_kernel[(x.numel() // n_cols,)](
            x, self.norm.weight, self.norm.bias, y, n_cols, self.norm.eps,
            BLOCK=block, SINGLE_BLOCK=n_cols <= block, num_warps=num_warps,
        )
        return y
