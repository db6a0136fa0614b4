"""Checkpoint writing (atomic), loading for inference (one clear error for a missing or bad file), and splitting a
checkpoint into files small enough to carry between device calls."""
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
    checkpoint = _read(Path(path))
    if "hyper_parameters" not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} holds no model (hyper_parameters and state_dict); is it a complete "
                              ".ckpt from `proxycomp fit`?")
    hparams, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    if "arch" not in hparams:
        raise CheckpointError(f"checkpoint {path} was written by an older proxycomp (flat model settings); "
                              "train it again with this version")
    lm = ProxyLM(**{**hparams, "arch": {**hparams["arch"], **arch_overrides}, "compile": False})
    lm.load_state_dict(state)
    return lm.to(map_location).eval()


# ---- shards: a checkpoint carried in files of a bounded size -----------------------------------------------------
SHARD_MAX_BYTES = 15 * 2**20  # under the 16 MiB a device call returns per file
STATE_FILE = "state.pt"
_PER_TENSOR_BYTES = 4096  # a tensor's record in a torch.save archive (name, pickle, alignment), generously


def split_checkpoint(path: str | Path, out_dir: str | Path, max_bytes: int = SHARD_MAX_BYTES) -> list[Path]:
    """A `proxycomp fit` checkpoint as files of at most `max_bytes` each, to carry between machines that bound what a
    file may weigh: `weights.NN.pt` (the model's floating-point tensors in bf16, a tied tensor stored once) and
    `state.pt` (everything else: hyper-parameters, loop, schedule, data-stream and callback state, the optimizers'
    settings). Adam's moments, twice the weights in fp32, are left out. Returns the files written."""
    checkpoint = _read(Path(path))
    weights = checkpoint.pop("state_dict")
    checkpoint["optimizer_states"] = [{"state": {}, "param_groups": o["param_groups"]}
                                      for o in checkpoint.get("optimizer_states", [])]
    shards: list[dict[str, torch.Tensor]] = [{}]
    size, dtypes, aliases, stored_at = 0, {}, {}, {}
    for name, tensor in weights.items():
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if where in stored_at:  # tied weights (embedding and head) share one storage
            aliases[name] = stored_at[where]
            continue
        stored_at[where], dtypes[name] = name, tensor.dtype
        small = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        nbytes = small.numel() * small.element_size() + _PER_TENSOR_BYTES
        if nbytes > max_bytes:
            raise CheckpointError(f"{name} alone takes {nbytes / 2**20:.1f} MiB in bf16, over the {max_bytes / 2**20:g} "
                                  "MiB per file; raise the limit")
        if size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name], size = small.contiguous(), size + nbytes
    out_dir = Path(out_dir)
    names = [f"weights.{i:02d}.pt" for i in range(len(shards))]
    state = {"checkpoint": checkpoint, "order": list(weights), "dtypes": dtypes, "aliases": aliases, "shards": names}
    written = []
    for name, payload in [*zip(names, shards), (STATE_FILE, state)]:
        with atomic_path(out_dir / name) as tmp:
            torch.save(payload, tmp)
        if (out_dir / name).stat().st_size > max_bytes:
            raise CheckpointError(f"{out_dir / name} came out at {(out_dir / name).stat().st_size / 2**20:.1f} MiB, over "
                                  f"the {max_bytes / 2**20:g} MiB per file")
        written.append(out_dir / name)
    return written


def join_checkpoint(folder: str | Path, out: str | Path) -> Path:
    """The checkpoint of `split_checkpoint` again, weights back in their dtype (rounded through bf16) and fresh Adam
    moments: `proxycomp fit --ckpt_path` resumes from it at its step, schedule and data position (the first updates
    re-estimate the moments), and `load_lm`, hence `proxycomp rl --ckpt`, reads it."""
    folder = Path(folder)
    if not (folder / STATE_FILE).is_file():
        raise CheckpointError(f"{folder} holds no {STATE_FILE}; pass the folder `proxycomp shards split` wrote")
    state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    weights: dict[str, torch.Tensor] = {}
    for shard in state["shards"]:
        if not (folder / shard).is_file():
            raise CheckpointError(f"{folder / shard} is missing; carry every file `proxycomp shards split` wrote")
        weights.update(torch.load(folder / shard, map_location="cpu", weights_only=True))
    weights = {name: weights[name].to(dtype) for name, dtype in state["dtypes"].items()}
    weights |= {name: weights[target] for name, target in state["aliases"].items()}
    checkpoint = state["checkpoint"]
    checkpoint["state_dict"] = {name: weights[name] for name in state["order"]}
    with atomic_path(out) as tmp:
        torch.save(checkpoint, tmp)
    return Path(out)


def _read(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a .ckpt written by `proxycomp fit`")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch/pickle/zip raise many types for a damaged file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({reason}); is it a complete .ckpt from "
                              "`proxycomp fit`?") from err
