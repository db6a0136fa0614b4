"""GELU with the tanh approximation, as in GPT-2 style MLPs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "elementwise"
SIZES = {
    "cpu": dict(batch=5, dim=2049),
    "gpu": dict(batch=4096, dim=8192),
    "gpu_heldout": dict(batch=2500, dim=12000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"]) * 3]


def get_init_inputs(size: str = "gpu") -> list:
    return []
