"""Suffix sums without the two flips: one program per row walks the row's blocks from the end, loading each
block in reversed order so a forward tl.cumsum yields suffix sums, and carries the running total."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 2048


@triton.jit
def reverse_cumsum_rows_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    carry = tl.zeros((BLOCK,), tl.float32)
    n_blocks = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_blocks):
        # Lane j holds column (block end - j), so lane 0 is the rightmost column of the block.
        cols = (n_blocks - i) * BLOCK - 1 - tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (tl.cumsum(x, axis=0) + carry).to(y_ptr.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows_last = x.movedim(self.dim, -1).contiguous()
        y = torch.empty_like(rows_last)
        n_cols = rows_last.shape[-1]
        block = min(triton.next_power_of_2(n_cols), MAX_BLOCK)
        reverse_cumsum_rows_kernel[(rows_last.numel() // n_cols,)](
            rows_last, y, n_cols, BLOCK=block, num_warps=8 if block >= 2048 else 4
        )
        return y.movedim(-1, self.dim)
