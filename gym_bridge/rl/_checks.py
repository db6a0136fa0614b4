"""Input checks shared by the RL core: one-line errors that name the argument and the fix."""
from __future__ import annotations

import torch

from proxycomp.errors import UserError


class RLConfigError(UserError):
    """Bad config, paths or command-line flags: every RL config class raises it from its own checks."""


def require_2d(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected a 2-D tensor (rows, positions), got {shape}")


def require_same_shape(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(f"{name}: shape {tuple(x.shape)} must equal {ref_name}'s shape {tuple(ref.shape)}")


def require_bool(name: str, x: torch.Tensor) -> None:
    if x.dtype != torch.bool:
        raise ValueError(f"{name}: expected a bool tensor, got {x.dtype}; pass `{name}.bool()`")


def require_finite_where(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    if not torch.isfinite(x[mask]).all():
        raise ValueError(f"{name}: NaN or inf at valid positions; give failed turns a finite reward or mask them")
