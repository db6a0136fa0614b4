"""RMSNorm (LLaMA style, statistics in float32) of bfloat16 hidden states with a learned weight."""
import torch
import torch.nn as nn

CATEGORY = "norm"
SIZES = {
    "cpu": dict(batch=2, seq=8, dim=1000),
    "gpu": dict(batch=8, seq=2048, dim=4096),
    "gpu_heldout": dict(batch=5, seq=4000, dim=3584),
}


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["seq"], s["dim"]).to(torch.bfloat16)]


def get_init_inputs(size: str = "gpu") -> list:
    return [SIZES[size]["dim"]]
