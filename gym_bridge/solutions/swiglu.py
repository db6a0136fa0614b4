"""SwiGLU gate: reads the gate and up halves of each row in place (no chunk copies), writes silu(gate) * up."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def swiglu_kernel(x_ptr, y_ptr, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < hidden
    x_row = x_ptr + row.to(tl.int64) * (2 * hidden)
    gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + hidden + cols, mask=mask, other=0.0).to(tl.float32)
    # Round silu(gate) to the input dtype before the product, as the eager reference does.
    act = (gate * tl.sigmoid(gate)).to(y_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row.to(tl.int64) * hidden + cols, (act * up).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 2:
            raise ValueError(f"swiglu needs an even last dimension, got shape {tuple(x.shape)}")
        hidden = x.shape[-1] // 2
        x2 = x.contiguous().view(-1, 2 * hidden)
        y = torch.empty(x2.shape[0], hidden, dtype=x.dtype, device=x.device)
        grid = (x2.shape[0], triton.cdiv(hidden, BLOCK))
        swiglu_kernel[grid](x2, y, hidden, BLOCK=BLOCK, num_warps=8)
        return y.view(*x.shape[:-1], hidden)
