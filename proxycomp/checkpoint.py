"""Checkpoint writing (atomic) and loading for inference (one clear error for a missing or bad file)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from proxycomp.lit import ProxyLM


class CheckpointError(RuntimeError):
    """A checkpoint that does not exist or cannot be read as a `ProxyLM`."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write to a temporary file beside the target, then rename: a crash never leaves a truncated .ckpt."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def load_lm(path: str | Path, map_location: str | torch.device = "cpu", **overrides) -> ProxyLM:
    """The trained module in eval mode; its hyper-parameters (incl. the vocabulary) come from the file,
    except `overrides` of hyper-parameters that leave the weights' shapes alone (e.g. attn_backend)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a .ckpt written by `proxycomp fit`")
    try:
        lm = ProxyLM.load_from_checkpoint(path, map_location=map_location, weights_only=True,
                                         **{"compile": False, **overrides})
    except Exception as err:  # torch/pickle/zip raise many types for a damaged file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({reason}); is it a complete .ckpt from `proxycomp fit`?") from err
    return lm.eval()
