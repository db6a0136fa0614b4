"""Linear layer, scaled by a constant, plus a residual input: linear(x) * scale + residual."""
import torch
import torch.nn as nn

CATEGORY = "matmul_fusion"
SIZES = {
    "cpu": dict(batch=40, in_features=96, out_features=64),
    "gpu": dict(batch=2048, in_features=2048, out_features=2048),
    "gpu_heldout": dict(batch=3072, in_features=1024, out_features=3072),
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale + residual


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["in_features"]), torch.randn(s["batch"], s["out_features"])]


def get_init_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [s["in_features"], s["out_features"], 0.5]
