"""Linear + bias + ReLU in one tiled Triton matmul: the bias and ReLU run on the float32 accumulator before
the single store. Tiles are visited in groups of GROUP_M row-tiles so neighbouring programs reuse the same
weight tiles from L2. fp32 dots use input_precision="ieee" (no TF32), matching the eager fp32 reference."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 64, 128, 32, 8


@triton.jit
def linear_bias_relu_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        # W is (N, K); reading it as a (K, N) tile computes x @ W.T without a transpose copy.
        b = tl.load(w_ptr + rk[:, None] * stride_wk + rn[None, :] * stride_wn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn, acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # The same nn.Linear as the reference, so its weights match under one seed; only its tensors are used.
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        w, b = self.linear.weight, self.linear.bias
        m, k = x2.shape
        n = w.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
        linear_bias_relu_kernel[grid](
            x2, w, b, y, m, n, k,
            x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=8, num_stages=3,
        )
        return y.view(*x.shape[:-1], n)
