"""KernelBench level 2, 63_Gemm_ReLU_Divide: relu(x @ W.T + b) / divisor, with the GEMM left to torch (cuBLAS, no
bias) and the bias, ReLU and division done in place on its output by one elementwise Triton epilogue. KernelBench
and KernelGYM accept torch compute beside a Triton kernel; the gym's coverage shows the GEMM's share."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def bias_relu_divide_kernel(y_ptr, b_ptr, n, n_cols, divisor, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask) + tl.load(b_ptr + offs % n_cols, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(y, 0.0) / divisor, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())  # torch's GEMM; y is ours to overwrite
        n = y.numel()
        bias_relu_divide_kernel[(triton.cdiv(n, BLOCK),)](y, self.linear.bias, n, y.shape[1], float(self.divisor),
                                                         BLOCK=BLOCK, num_warps=8)
        return y
