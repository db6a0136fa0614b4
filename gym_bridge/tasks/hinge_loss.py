"""Mean hinge loss max(0, 1 - prediction * target) with targets in {-1, +1}."""
import torch
import torch.nn as nn

CATEGORY = "loss"
SIZES = {
    "cpu": dict(batch=50, dim=300),
    "gpu": dict(batch=8192, dim=4096),
    "gpu_heldout": dict(batch=4096, dim=10000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    predictions = torch.randn(s["batch"], s["dim"])
    targets = torch.randint(0, 2, (s["batch"], s["dim"])).float() * 2 - 1
    return [predictions, targets]


def get_init_inputs(size: str = "gpu") -> list:
    return []
