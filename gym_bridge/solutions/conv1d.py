"""Conv1d (stride 1, zero padding) as a sum of shifted matmuls: for each tap k, out[oc, l] +=
W[:, :, k] @ x[:, l + k - pad], computed on [BLOCK_OC, BLOCK_IC] x [BLOCK_IC, BLOCK_L] tiles with tl.dot.
Padding is the load mask, so no padded copy of x is made. IEEE fp32 dots (no TF32)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_L = 128


@triton.jit
def conv1d_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, C_IN, C_OUT, L_IN, L_OUT, PAD,
    stride_xb, stride_xc, stride_xl, stride_wo, stride_wi, stride_wk, stride_yb, stride_yc, stride_yl,
    KSIZE: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_IC: tl.constexpr, BLOCK_L: tl.constexpr,
):
    pid_l = tl.program_id(0)
    pid_oc = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    ocs = pid_oc * BLOCK_OC + tl.arange(0, BLOCK_OC)
    ls = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros((BLOCK_OC, BLOCK_L), tl.float32)
    for k in tl.static_range(KSIZE):
        pos = ls + k - PAD
        pos_ok = (pos >= 0) & (pos < L_IN)
        for c0 in range(0, C_IN, BLOCK_IC):
            ics = c0 + tl.arange(0, BLOCK_IC)
            w = tl.load(w_ptr + ocs[:, None] * stride_wo + ics[None, :] * stride_wi + k * stride_wk,
                        mask=(ocs[:, None] < C_OUT) & (ics[None, :] < C_IN), other=0.0)
            xs = tl.load(x_ptr + batch * stride_xb + ics[:, None] * stride_xc + pos[None, :] * stride_xl,
                         mask=(ics[:, None] < C_IN) & pos_ok[None, :], other=0.0)
            acc = tl.dot(w, xs, acc, input_precision="ieee")
    acc += tl.load(b_ptr + ocs, mask=ocs < C_OUT, other=0.0).to(tl.float32)[:, None]
    tl.store(y_ptr + batch * stride_yb + ocs[:, None] * stride_yc + ls[None, :] * stride_yl,
             acc.to(y_ptr.dtype.element_ty), mask=(ocs[:, None] < C_OUT) & (ls[None, :] < L_OUT))


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        # The same nn.Conv1d as the reference, so its weights match under one seed; only its tensors are used.
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.conv.weight, self.conv.bias
        batch, c_in, l_in = x.shape
        c_out, _, ksize = w.shape
        pad = self.conv.padding[0]
        l_out = l_in + 2 * pad - ksize + 1
        y = torch.empty(batch, c_out, l_out, dtype=x.dtype, device=x.device)
        # tl.dot needs every tile side >= 16; masks cover the padding lanes.
        block_oc = max(16, min(64, triton.next_power_of_2(c_out)))
        block_ic = max(16, min(32, triton.next_power_of_2(c_in)))
        grid = (triton.cdiv(l_out, BLOCK_L), triton.cdiv(c_out, block_oc), batch)
        conv1d_kernel[grid](
            x, w, b, y, c_in, c_out, l_in, l_out, pad,
            x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
            y.stride(0), y.stride(1), y.stride(2),
            KSIZE=ksize, BLOCK_OC=block_oc, BLOCK_IC=block_ic, BLOCK_L=BLOCK_L, num_warps=4, num_stages=2,
        )
        return y
