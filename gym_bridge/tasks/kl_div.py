"""KL divergence KL(targets || predictions) between row-wise distributions, batch-mean reduction."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"
SIZES = {
    "cpu": dict(batch=32, dim=500),
    "gpu": dict(batch=8192, dim=4096),
    "gpu_heldout": dict(batch=4096, dim=9000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    predictions = torch.softmax(torch.randn(s["batch"], s["dim"]), dim=-1)
    targets = torch.softmax(torch.randn(s["batch"], s["dim"]), dim=-1)
    return [predictions, targets]


def get_init_inputs(size: str = "gpu") -> list:
    return []
