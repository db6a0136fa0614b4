"""Max over any dimension, viewed as (outer, reduced, inner) tiles so loads stay contiguous along `inner`."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE = 4096


@triton.jit
def max_kernel(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    outer = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_mask = cols < INNER
    base = x_ptr + outer.to(tl.int64) * R * INNER
    best = tl.full((BLOCK_R, BLOCK_I), float("-inf"), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows[:, None] < R) & col_mask[None, :]
        x = tl.load(base + rows[:, None] * INNER + cols[None, :], mask=mask, other=float("-inf"))
        best = tl.maximum(best, x.to(tl.float32))
    result = tl.max(best, axis=0)
    tl.store(y_ptr + outer.to(tl.int64) * INNER + cols, result.to(y_ptr.dtype.element_ty), mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, r, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1 :])
        y = torch.empty((*x.shape[:dim], *x.shape[dim + 1 :]), dtype=x.dtype, device=x.device)
        block_i = min(triton.next_power_of_2(inner), 128)
        block_r = min(triton.next_power_of_2(r), max(1, TILE // block_i))
        grid = (outer, triton.cdiv(inner, block_i))
        max_kernel[grid](x, y, r, inner, BLOCK_R=block_r, BLOCK_I=block_i, num_warps=4)
        return y
