"""Depthwise 3x3 2-D convolution (one filter per channel, padding 1, with bias)."""
import torch
import torch.nn as nn

CATEGORY = "conv_pool"
SIZES = {
    "cpu": dict(batch=2, channels=4, height=33, width=35),
    "gpu": dict(batch=32, channels=128, height=128, width=128),
    "gpu_heldout": dict(batch=16, channels=96, height=224, width=224),
}


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["channels"], s["height"], s["width"])]


def get_init_inputs(size: str = "gpu") -> list:
    return [SIZES[size]["channels"], 3]
