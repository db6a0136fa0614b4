"""Leaky ReLU and the scale fused into one Triton pass."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def leaky_relu_scale_kernel(x_ptr, y_ptr, n, negative_slope, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(x >= 0, x, x * negative_slope) * scale
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float, scale: float):
        super().__init__()
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        leaky_relu_scale_kernel[(triton.cdiv(n, BLOCK),)](
            x, y, n, float(self.negative_slope), float(self.scale), BLOCK=BLOCK, num_warps=8
        )
        return y
