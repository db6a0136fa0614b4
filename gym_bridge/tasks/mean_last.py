"""Mean over the last dimension of bfloat16 rows."""
import torch
import torch.nn as nn

CATEGORY = "reduction"
SIZES = {
    "cpu": dict(batch=40, dim=333),
    "gpu": dict(batch=16384, dim=4096),
    "gpu_heldout": dict(batch=8192, dim=9000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=-1)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [(torch.randn(s["batch"], s["dim"]) + 0.5).to(torch.bfloat16)]


def get_init_inputs(size: str = "gpu") -> list:
    return []
