"""Inclusive prefix product along dimension 1 (factors near 1 so the products stay in range)."""
import torch
import torch.nn as nn

CATEGORY = "scan"
SIZES = {
    "cpu": dict(batch=8, length=2000),
    "gpu": dict(batch=4096, length=8192),
    "gpu_heldout": dict(batch=2048, length=16384),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=self.dim)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [0.9 + 0.2 * torch.rand(s["batch"], s["length"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [1]
