"""ReLU of a 2-D float32 activation tensor."""
import torch
import torch.nn as nn

CATEGORY = "elementwise"
SIZES = {
    "cpu": dict(batch=7, dim=1001),
    "gpu": dict(batch=4096, dim=16384),
    "gpu_heldout": dict(batch=3000, dim=20000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"])]


def get_init_inputs(size: str = "gpu") -> list:
    return []
