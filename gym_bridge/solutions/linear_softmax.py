"""Linear + bias + row softmax fused: each program owns BLOCK_M full output rows. When a row fits one N tile
(out_features <= MAX_BLOCK) the logits never leave registers; wider rows store raw logits tile by tile while
keeping an online max/sum, then rescale them in place. IEEE fp32 dots (no TF32)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 512
BLOCK_K = 32
ACC_ELEMENTS = 16384  # BLOCK_M * BLOCK_N: caps the accumulator's registers per program


@triton.jit
def _logits_tile(x_ptr, w_ptr, b_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * stride_xm + rk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rk[:, None] * stride_wk + rn[None, :] * stride_wn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    # Padding columns get -inf so they add nothing to the row's max or sum.
    return tl.where(rn[None, :] < N, acc, float("-inf"))


@triton.jit
def linear_softmax_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SINGLE_TILE: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if SINGLE_TILE:
        logits = _logits_tile(x_ptr, w_ptr, b_ptr, rm, cols, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                              BLOCK_M, BLOCK_N, BLOCK_K)
        e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        probs = e / tl.sum(e, axis=1)[:, None]
        tl.store(y_ptr + rm[:, None] * stride_ym + cols[None, :] * stride_yn, probs.to(y_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (cols[None, :] < N))
    else:
        run_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        run_sum = tl.zeros((BLOCK_M,), tl.float32)
        for n0 in range(0, N, BLOCK_N):
            rn = n0 + cols
            logits = _logits_tile(x_ptr, w_ptr, b_ptr, rm, rn, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                                  BLOCK_M, BLOCK_N, BLOCK_K)
            new_max = tl.maximum(run_max, tl.max(logits, axis=1))
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(logits - new_max[:, None]), axis=1)
            run_max = new_max
            tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn, logits,
                     mask=(rm[:, None] < M) & (rn[None, :] < N))
        # Make this program's logit stores visible to all its threads before they are re-read.
        tl.debug_barrier()
        for n0 in range(0, N, BLOCK_N):
            rn = n0 + cols
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            ptrs = y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn
            logits = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            probs = tl.exp(logits - run_max[:, None]) / run_sum[:, None]
            tl.store(ptrs, probs.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # The same nn.Linear as the reference, so its weights match under one seed; only its tensors are used.
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"linear_softmax (softmax over dim 1) expects a 2-D input, got shape {tuple(x.shape)}")
        w, b = self.linear.weight, self.linear.bias
        m, k = x.shape
        n = w.shape[0]
        # The wide-row path stages raw logits in y itself (exact for this float32 task).
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        block_n = max(16, min(triton.next_power_of_2(n), MAX_BLOCK))
        block_m = max(16, min(64, ACC_ELEMENTS // block_n))
        linear_softmax_kernel[(triton.cdiv(m, block_m),)](
            x, w, b, y, m, n, k,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=BLOCK_K, SINGLE_TILE=n <= block_n, num_warps=8, num_stages=3,
        )
        return y
