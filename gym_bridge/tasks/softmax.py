"""Softmax over the last dimension of 2-D float32 logits."""
import torch
import torch.nn as nn

CATEGORY = "norm"
SIZES = {
    "cpu": dict(batch=6, dim=2500),
    "gpu": dict(batch=4096, dim=16384),
    "gpu_heldout": dict(batch=8192, dim=6000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"]) * 5]


def get_init_inputs(size: str = "gpu") -> list:
    return []
