import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 8
dim = 1000


def get_inputs():
    x = torch.randn(batch_size, dim) * 5
    return [x]


def get_init_inputs():
    return []
