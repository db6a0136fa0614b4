"""A partial kernel, legal in KernelBench: torch's GEMM, then the bias and ReLU in one Triton epilogue."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask) + tl.load(b_ptr + offs % cols, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.matmul(x, self.linear.weight.t())
        out = torch.empty_like(y)
        bias_relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, self.linear.bias, out, y.numel(), y.shape[-1],
                                                            BLOCK=1024)
        return out
