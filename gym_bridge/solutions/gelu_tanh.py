"""Tanh-approximate GELU in one Triton pass.

0.5 * x * (1 + tanh(u)) equals x * sigmoid(2u), which needs one exp and no tanh intrinsic.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def gelu_tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi)
    # Clamping the exponent keeps exp finite; x / (1 + e^80) is already 0 to float32 precision.
    y = x / (1.0 + tl.exp(tl.minimum(-2.0 * u, 80.0)))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_tanh_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=8)
        return y
