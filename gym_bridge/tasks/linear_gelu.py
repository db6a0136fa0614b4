"""Linear layer followed by exact (erf) GELU, as in a transformer MLP's first projection."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "matmul_fusion"
SIZES = {
    "cpu": dict(batch=48, in_features=64, out_features=72),
    "gpu": dict(batch=4096, in_features=1024, out_features=4096),
    "gpu_heldout": dict(batch=2048, in_features=3072, out_features=2048),
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["in_features"])]


def get_init_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [s["in_features"], s["out_features"]]
