# (b) Lazy: a trivial Triton copy kernel launches, torch.matmul does the real work (matmul task).
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k**0.5)

    def forward(self, x):
        y = torch.matmul(x, self.weight)
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 256),)](y, out, y.numel(), BLOCK=256)
        return out
