"""Mean squared error between two 3-D float32 tensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"
SIZES = {
    "cpu": dict(batch=3, rows=57, cols=91),
    "gpu": dict(batch=256, rows=256, cols=512),
    "gpu_heldout": dict(batch=128, rows=700, cols=400),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(predictions, targets)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    shape = (s["batch"], s["rows"], s["cols"])
    return [torch.randn(shape), torch.randn(shape)]


def get_init_inputs(size: str = "gpu") -> list:
    return []
