"""1-D max pooling (kernel 3, stride 2, padding 1) over (batch, channels, length)."""
import torch
import torch.nn as nn

CATEGORY = "conv_pool"
SIZES = {
    "cpu": dict(batch=2, channels=8, length=999),
    "gpu": dict(batch=64, channels=256, length=4096),
    "gpu_heldout": dict(batch=32, channels=384, length=6000),
}


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["channels"], s["length"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [3, 2, 1]
