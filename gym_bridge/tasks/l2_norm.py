"""Euclidean (L2) norm over the middle dimension of a 3-D tensor."""
import torch
import torch.nn as nn

CATEGORY = "reduction"
SIZES = {
    "cpu": dict(batch=5, rows=127, cols=31),
    "gpu": dict(batch=256, rows=512, cols=512),
    "gpu_heldout": dict(batch=96, rows=1500, cols=600),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=2, dim=self.dim)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["rows"], s["cols"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [1]
