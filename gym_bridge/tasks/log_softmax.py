"""Log-softmax over dimension 1 of 2-D float32 logits."""
import torch
import torch.nn as nn

CATEGORY = "norm"
SIZES = {
    "cpu": dict(batch=10, dim=1000),
    "gpu": dict(batch=8192, dim=8192),
    "gpu_heldout": dict(batch=2048, dim=30000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"]) * 5]


def get_init_inputs(size: str = "gpu") -> list:
    return []
