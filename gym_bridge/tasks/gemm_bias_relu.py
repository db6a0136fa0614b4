"""Linear layer (x @ W.T + b) followed by ReLU."""
import torch
import torch.nn as nn

CATEGORY = "matmul_fusion"
SIZES = {
    "cpu": dict(batch=64, in_features=80, out_features=96),
    "gpu": dict(batch=2048, in_features=2048, out_features=2048),
    "gpu_heldout": dict(batch=1024, in_features=4096, out_features=3072),
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["in_features"])]


def get_init_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [s["in_features"], s["out_features"]]
