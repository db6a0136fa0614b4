"""SiLU (x * sigmoid(x)) on bfloat16 activations."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "elementwise"
SIZES = {
    "cpu": dict(batch=9, dim=1500),
    "gpu": dict(batch=8192, dim=8192),
    "gpu_heldout": dict(batch=6000, dim=10000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [(torch.randn(s["batch"], s["dim"]) * 4).to(torch.bfloat16)]


def get_init_inputs(size: str = "gpu") -> list:
    return []
