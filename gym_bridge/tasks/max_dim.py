"""Maximum values over one dimension of a 3-D tensor."""
import torch
import torch.nn as nn

CATEGORY = "reduction"
SIZES = {
    "cpu": dict(batch=4, rows=50, cols=97),
    "gpu": dict(batch=128, rows=512, cols=1024),
    "gpu_heldout": dict(batch=100, rows=600, cols=1100),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["rows"], s["cols"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [2]
