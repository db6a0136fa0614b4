"""Leaky ReLU followed by a constant scale, on a 3-D tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "elementwise"
SIZES = {
    "cpu": dict(batch=3, seq=4, dim=997),
    "gpu": dict(batch=64, seq=512, dim=1024),
    "gpu_heldout": dict(batch=48, seq=700, dim=1000),
}


class Model(nn.Module):
    def __init__(self, negative_slope: float, scale: float):
        super().__init__()
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope) * self.scale


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["seq"], s["dim"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [0.1, 2.5]
