"""Mean cross-entropy of float32 logits against integer class labels."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "loss"
SIZES = {
    "cpu": dict(batch=64, classes=129),
    "gpu": dict(batch=32768, classes=1000),
    "gpu_heldout": dict(batch=8192, classes=5000),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    logits = torch.randn(s["batch"], s["classes"]) * 3
    targets = torch.randint(0, s["classes"], (s["batch"],))
    return [logits, targets]


def get_init_inputs(size: str = "gpu") -> list:
    return []
