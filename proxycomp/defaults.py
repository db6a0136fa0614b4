"""The defaults that several layers share, each written here once (tests/test_defaults.py keeps it so).

Like `errors.py`, a floor module: it imports nothing of the package, and torch only when a machine-dependent
default is asked for, so a light caller (the dispatcher's `--help`) stays light.
"""
from __future__ import annotations

GRAD_CLIP = 1.0  # gradient-norm clip of pretraining, the comparison's arms and RL
SPM_VOCAB_SIZE = 8192  # pieces of the SentencePiece view


def default_device() -> str:
    """"cuda" on a machine with a CUDA GPU, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_precision(device: str | None = None) -> str:
    """Lightning's and Fabric's precision on `device` (None: `default_device()`): bf16-mixed on a CUDA GPU, 32-true
    on a CPU."""
    return "bf16-mixed" if (device or default_device()) == "cuda" else "32-true"


def default_stride(seq_len: int) -> int:
    """The sliding-window stride of bits-per-byte scoring: half a window."""
    return max(1, seq_len // 2)
