"""Checkpoint writing (atomic) and loading for inference (one clear error for a missing or bad file)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from proxycomp.errors import UserError
from proxycomp.files import atomic_path
from proxycomp.lit import ProxyLM


class CheckpointError(UserError):
    """A checkpoint that does not exist or cannot be read as a `ProxyLM`."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write to a temporary file beside the target, then rename: a crash never leaves a truncated .ckpt."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)


def load_lm(path: str | Path, map_location: str | torch.device = "cpu", **arch_overrides) -> ProxyLM:
    """The trained module in eval mode, built from the file alone (its hyper-parameters hold the vocabulary).
    `arch_overrides` replace architecture fields that leave the weights' shapes alone (e.g. attn_backend)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a .ckpt written by `proxycomp fit`")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
        hparams, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    except Exception as err:  # torch/pickle/zip raise many types for a damaged file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({reason}); is it a complete .ckpt from "
                              "`proxycomp fit`?") from err
    if "arch" not in hparams:
        raise CheckpointError(f"checkpoint {path} was written by an older proxycomp (flat model settings); "
                              "train it again with this version")
    lm = ProxyLM(**{**hparams, "arch": {**hparams["arch"], **arch_overrides}, "compile": False})
    lm.load_state_dict(state)
    return lm.to(map_location).eval()
