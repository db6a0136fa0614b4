"""LayerNorm over the last dimension (learned weight and bias) of a batch of token vectors."""
import torch
import torch.nn as nn

CATEGORY = "norm"
SIZES = {
    "cpu": dict(tokens=20, dim=768),
    "gpu": dict(tokens=16384, dim=4096),
    "gpu_heldout": dict(tokens=8192, dim=7168),
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["tokens"], s["dim"]) * 2 + 1]


def get_init_inputs(size: str = "gpu") -> list:
    return [SIZES[size]["dim"]]
