"""KernelBench level 2, 76_Gemm_Add_ReLU: relu(x @ W.T + bias), all of it in one Triton kernel.

A tiled GEMM whose epilogue adds the bias and applies the ReLU before the only store. The problem is float32 and
both harnesses compare at 1e-4, which a plain TF32 product (10-bit mantissa) misses at these depths, so the tensor
cores run "tf32x3": each operand split into a TF32 head and a TF32 remainder, three products summed, about float32
accuracy. Programs walk the output in groups of GROUP_M row blocks so neighbouring programs share column blocks of
W while they are in L2. Rows and columns past the edge are clamped for the loads (never read out of bounds) and
masked for the store; only K is masked in the loop."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 32, 8
PRECISION = "tf32x3"


@triton.jit
def gemm_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                          stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * blocks_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(blocks_m - first_m, GROUP_M)
    block_m = first_m + (pid % group_size) % rows_in_group
    block_n = (pid % group_size) // rows_in_group

    rm = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rm_load, rn_load = rm % M, rn % N
    x_tile = x_ptr + rm_load[:, None].to(tl.int64) * stride_xm + rk[None, :] * stride_xk
    w_tile = w_ptr + rk[:, None] * stride_wk + rn_load[None, :].to(tl.int64) * stride_wn  # a (K, N) tile of W.T
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = k0 + rk < K
        a = tl.load(x_tile, mask=k_ok[None, :], other=0.0)
        b = tl.load(w_tile, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        x_tile += BLOCK_K * stride_xk
        w_tile += BLOCK_K * stride_wk

    bias = tl.load(b_ptr + rn_load)
    out = tl.maximum(acc + bias[None, :], 0.0)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + rm[:, None].to(tl.int64) * stride_ym + rn[None, :] * stride_yn, out, mask=mask)


def gemm_bias_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    (M, K), N = x.shape, weight.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    gemm_bias_relu_kernel[grid](x, weight, bias, y, M, N, K, x.stride(0), x.stride(1), weight.stride(0),
                                weight.stride(1), y.stride(0), y.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, PRECISION=PRECISION, num_warps=8, num_stages=3)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        # created in the reference's order, so the same seed gives the same weights
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return gemm_bias_relu(x, self.gemm.weight, self.bias)
