"""Mean over the last dimension: one program per row, float32 accumulation, one rounding on store."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 4096


@triton.jit
def mean_rows_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * n_cols
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    tl.store(y_ptr + row, mean.to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        rows = x.numel() // n_cols
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        mean_rows_kernel[(rows,)](x, y, n_cols, BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y
