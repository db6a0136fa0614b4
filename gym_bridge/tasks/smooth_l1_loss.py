"""Smooth L1 (Huber-style) loss with a configurable beta, mean reduction."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"
SIZES = {
    "cpu": dict(batch=60, dim=257),
    "gpu": dict(batch=8192, dim=4096),
    "gpu_heldout": dict(batch=5000, dim=6000),
}


class Model(nn.Module):
    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(predictions, targets, beta=self.beta)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["dim"]), torch.randn(s["batch"], s["dim"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [0.5]
