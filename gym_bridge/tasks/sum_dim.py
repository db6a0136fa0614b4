"""Sum over the middle dimension of a 3-D tensor, keeping the reduced dimension."""
import torch
import torch.nn as nn

CATEGORY = "reduction"
SIZES = {
    "cpu": dict(batch=3, rows=67, cols=45),
    "gpu": dict(batch=128, rows=1024, cols=512),
    "gpu_heldout": dict(batch=64, rows=2000, cols=700),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["rows"], s["cols"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [1]
