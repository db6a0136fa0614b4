"""Index of the maximum along the last dimension (int64 output)."""
import torch
import torch.nn as nn

CATEGORY = "reduction"
SIZES = {
    "cpu": dict(batch=33, dim=500),
    "gpu": dict(batch=16384, dim=4096),
    "gpu_heldout": dict(batch=4000, dim=15000),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [-1]
