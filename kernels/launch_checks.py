"""Input checks shared by the launchers: each failure is one line naming the argument and the fix."""
from __future__ import annotations

import os

import torch


class KernelInputError(ValueError):
    """A launcher was given tensors it cannot run on."""


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (tests set this when there is no CUDA)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_device(op: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and that device can run Triton (CUDA, or CPU under the interpreter)."""
    devices = {name: t.device for name, t in tensors.items()}
    first_name, device = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != device:
            raise KernelInputError(f"{op}: {name} is on {dev} but {first_name} is on {device}; move them to one device")
    if device.type == "cpu" and not interpreting():
        raise KernelInputError(
            f"{op}: tensors are on the CPU; move them to a CUDA device, or set TRITON_INTERPRET=1 before importing "
            "triton"
        )
    if device.type not in ("cpu", "cuda"):
        raise KernelInputError(f"{op}: device {device} is not supported; use a CUDA device")
    return device


def check_rank(op: str, name: str, t: torch.Tensor, rank: int, layout: str) -> None:
    if t.dim() != rank:
        raise KernelInputError(f"{op}: {name} must have shape {layout}, got {tuple(t.shape)}")
