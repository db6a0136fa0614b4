"""1-D convolution with a small odd kernel and "same" padding."""
import torch
import torch.nn as nn

CATEGORY = "conv_pool"
SIZES = {
    "cpu": dict(batch=2, in_channels=4, out_channels=8, length=300, kernel_size=3),
    "gpu": dict(batch=32, in_channels=64, out_channels=128, length=4096, kernel_size=3),
    "gpu_heldout": dict(batch=16, in_channels=96, out_channels=96, length=8000, kernel_size=5),
}


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [torch.randn(s["batch"], s["in_channels"], s["length"])]


def get_init_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return [s["in_channels"], s["out_channels"], s["kernel_size"]]
