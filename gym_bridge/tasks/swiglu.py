"""SwiGLU gating: split the last dim into gate and up halves, return silu(gate) * up, in float16."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "elementwise"
SIZES = {
    "cpu": dict(tokens=33, hidden=300),
    "gpu": dict(tokens=8192, hidden=4096),
    "gpu_heldout": dict(tokens=5000, hidden=5504),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [(torch.randn(s["tokens"], 2 * s["hidden"]) * 2).to(torch.float16)]


def get_init_inputs(size: str = "gpu") -> list:
    return []
