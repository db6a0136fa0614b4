import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU, in KernelBench's format: shapes are module constants and get_inputs() returns CPU tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
