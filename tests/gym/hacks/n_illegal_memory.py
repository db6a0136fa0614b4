# (n) Illegal memory access: stores far outside the output buffer. Expect: crashed (worker restarted).
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def wild_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs + (1 << 40), x)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        wild_store[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
