"""Linear layer followed by softmax over its outputs (a classifier head)."""
import torch
import torch.nn as nn

CATEGORY = "matmul_fusion"
SIZES = {
    "cpu": dict(batch=64, in_features=80, out_features=40),
    "gpu": dict(batch=8192, in_features=1024, out_features=256),
    "gpu_heldout": dict(batch=16384, in_features=512, out_features=384),
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=1)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["in_features"])]


def get_init_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [s["in_features"], s["out_features"]]
