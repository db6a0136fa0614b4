"""Depthwise Conv2d (stride 1, zero padding): each program computes a [BLOCK_H, BLOCK_W] output tile of one
(batch, channel) plane as a sum over the KxK taps of shifted, masked input tiles times one scalar weight."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_H, BLOCK_W = 16, 64


@triton.jit
def depthwise_conv2d_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, C, H, W, H_OUT, W_OUT, PAD,
    KH: tl.constexpr, KW: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    plane = tl.program_id(0).to(tl.int64)  # batch * C + channel
    channel = plane % C
    hs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ws = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    x_plane = x_ptr + plane * H * W
    acc = tl.zeros((BLOCK_H, BLOCK_W), tl.float32)
    for i in tl.static_range(KH):
        for j in tl.static_range(KW):
            h_in = hs[:, None] + (i - PAD)
            w_in = ws[None, :] + (j - PAD)
            ok = (h_in >= 0) & (h_in < H) & (w_in >= 0) & (w_in < W)
            tap = tl.load(w_ptr + channel * KH * KW + i * KW + j).to(tl.float32)
            acc += tl.load(x_plane + h_in * W + w_in, mask=ok, other=0.0).to(tl.float32) * tap
    acc += tl.load(b_ptr + channel).to(tl.float32)
    out_mask = (hs[:, None] < H_OUT) & (ws[None, :] < W_OUT)
    tl.store(y_ptr + plane * H_OUT * W_OUT + hs[:, None] * W_OUT + ws[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=out_mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        # The same nn.Conv2d as the reference, so its weights match under one seed; only its tensors are used.
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.conv.weight.contiguous()  # (C, 1, KH, KW)
        batch, channels, h, width = x.shape
        kh, kw = w.shape[-2:]
        pad = self.conv.padding[0]
        h_out, w_out = h + 2 * pad - kh + 1, width + 2 * pad - kw + 1
        y = torch.empty(batch, channels, h_out, w_out, dtype=x.dtype, device=x.device)
        grid = (batch * channels, triton.cdiv(h_out, BLOCK_H), triton.cdiv(w_out, BLOCK_W))
        depthwise_conv2d_kernel[grid](
            x, w, self.conv.bias, y, channels, h, width, h_out, w_out, pad,
            KH=kh, KW=kw, BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W, num_warps=4,
        )
        return y
