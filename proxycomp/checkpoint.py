"""Checkpoints: atomic writing, one clear error for a missing or damaged file, the self-contained format, and
splitting a checkpoint into files small enough to carry between device calls.

Every checkpoint a command writes holds `hyper_parameters` (the model's arch/optim/vocabulary dicts) and a
`state_dict` of `ProxyLM` (keys `model.*`), so `generate`, `eval-bpb`, `rl` and `fit --init_from` read any of them:
those of `fit` (Lightning's, which add the trainer and data state), of the RL warm start and of RL (which add
the optimizer and step). A SentencePiece model travels with them (`spm_model`, or in the data module's state).
"""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from torch import nn

from proxycomp.errors import UserError
from proxycomp.files import atomic_path
from proxycomp.lit import ProxyLM

MODEL_PREFIX = "model."  # ProxyLM holds the transformer as `.model`
DATA_STATE_KEY = "ProxyDataModule"  # where Lightning keeps the data module's state (its class name)


class CheckpointError(UserError):
    """A checkpoint that does not exist, cannot be read or does not fit the model."""


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Around a load of `path`: a missing file or any failure to read it becomes one `CheckpointError` line."""
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; pass a .ckpt written by proxycomp (fit, rl)")
    try:
        yield
    except Exception as err:  # torch/pickle/zip raise many types for a damaged file
        # The first sentence: torch's weights-only refusal goes on for a paragraph about trusting the file.
        reason = str(err).strip().splitlines()[0].split(". ")[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({reason}); is it a complete .ckpt written by "
                              "proxycomp?") from err


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    with reading(path):
        return torch.load(path, map_location=map_location, weights_only=True)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write to a temporary file beside the target, then rename: a crash never leaves a truncated .ckpt, and a full
    disk says so (`atomic_path` finds the failed write under the error torch's zip writer raises after it). Reads
    fail in one line."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            torch.save(checkpoint, f)

    def load_checkpoint(self, path, *args, **kwargs) -> dict[str, Any]:
        with reading(path):
            return super().load_checkpoint(path, *args, **kwargs)


def lm_state(hyper_parameters: dict, model: nn.Module, spm_model: bytes | None) -> dict[str, Any]:
    """The self-contained checkpoint of a transformer (a `Transformer`, or one wrapped by Fabric)."""
    return {"hyper_parameters": hyper_parameters, "spm_model": spm_model,
            "state_dict": {MODEL_PREFIX + k: v for k, v in model.state_dict().items()}}


def save_lm(path: str | Path, hyper_parameters: dict, model: nn.Module, spm_model: bytes | None) -> None:
    AtomicCheckpointIO().save_checkpoint(lm_state(hyper_parameters, model, spm_model), path)


def model_weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The transformer's own state dict from a checkpoint's `ProxyLM` state dict."""
    return {k.removeprefix(MODEL_PREFIX): v for k, v in checkpoint["state_dict"].items()}


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    """sha256 of a model's state dict with its floating tensors rounded to bf16: the same for a model and its copy
    carried between machines as `proxycomp shards` (bf16 weights), different for any trained change."""
    digest = hashlib.sha256()
    for name, tensor in weights.items():
        tensor = tensor.detach().cpu().contiguous()
        if tensor.is_floating_point():
            tensor = tensor.to(torch.bfloat16).view(torch.int16)
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def spm_model_of(checkpoint: dict[str, Any]) -> bytes | None:
    """The SentencePiece model a checkpoint carries: its own, or its data module's (a `fit` checkpoint)."""
    return checkpoint.get("spm_model") or (checkpoint.get(DATA_STATE_KEY) or {}).get("spm_model")


def lm_from_checkpoint(checkpoint: dict[str, Any], path: str | Path, map_location: str | torch.device = "cpu",
                       **arch_overrides) -> ProxyLM:
    """The trained module in eval mode, built from the checkpoint alone. `arch_overrides` replace architecture
    fields that leave the weights' shapes alone (e.g. attn_backend)."""
    try:
        hparams, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    except (KeyError, TypeError):
        raise CheckpointError(f"checkpoint {path} holds no hyper_parameters and state_dict; pass a .ckpt written by "
                              "proxycomp (fit, rl)") from None
    if "arch" not in hparams:
        raise CheckpointError(f"checkpoint {path} was written by an older proxycomp (flat model settings); "
                              "train it again with this version")
    lm = ProxyLM(**{**hparams, "arch": {**hparams["arch"], **arch_overrides}, "compile": False})
    lm.load_state_dict(state)
    return lm.to(map_location).eval()


def load_lm(path: str | Path, map_location: str | torch.device = "cpu", **arch_overrides) -> ProxyLM:
    return lm_from_checkpoint(read_checkpoint(path, map_location), path, map_location, **arch_overrides)


def init_weights(lm: ProxyLM, path: str | Path) -> bytes | None:
    """Load the weights of checkpoint `path` into `lm` (nothing else: no optimizer, step or data state), after
    checking that they fit; returns the SentencePiece model the checkpoint carries."""
    checkpoint = read_checkpoint(path)
    changes = lm.weight_changes(checkpoint.get("hyper_parameters") or {})
    if changes:
        raise CheckpointError(f"--init_from {path}: its weights do not fit this model ({'; '.join(changes)}); set the "
                              "model and views it was trained with")
    lm.model.load_state_dict(model_weights(checkpoint))
    return spm_model_of(checkpoint)


# ---- shards: a checkpoint carried in files of a bounded size -----------------------------------------------------
SHARD_MAX_BYTES = 15 * 2**20  # under the 16 MiB a device call returns per file
STATE_FILE = "state.pt"
_PER_TENSOR_BYTES = 4096  # a tensor's record in a torch.save archive (name, pickle, alignment), generously


# Tensor collections of a checkpoint that go into the weight files: a fit checkpoint's `state_dict`, and an RL
# checkpoint's (`proxycomp rl`: Fabric's) `state_dict` and the KL reference's `reference_state_dict`.
WEIGHT_COLLECTIONS = ("state_dict", "reference_state_dict")


def _optimizer_states(checkpoint: dict) -> list[dict]:
    """The optimizers' state dicts in place: Lightning's `optimizer_states` list, or an RL run's `optimizer`."""
    if "optimizer" in checkpoint:
        return [checkpoint["optimizer"]]
    return checkpoint.get("optimizer_states", [])


def split_checkpoint(path: str | Path, out_dir: str | Path, max_bytes: int = SHARD_MAX_BYTES,
                     exact: bool = False) -> list[Path]:
    """A `proxycomp fit` or `proxycomp rl` checkpoint as files of at most `max_bytes` each, to carry between machines
    that bound what a file may weigh: `weights.NN.pt` (the model's floating-point tensors in bf16, a tied tensor stored
    once; an RL run's KL reference too) and `state.pt` (everything else: hyper-parameters, loop, schedule, RL step,
    data-stream and callback state, the optimizers' settings). Adam's moments, twice the weights in fp32, are left
    out: the first updates after a resume re-estimate them. `exact` keeps every dtype and the moments (as more weight
    files), for a resume that continues bit for bit where it stopped, at ~6x the bytes. Returns the files written."""
    checkpoint = read_checkpoint(path)
    tensors: dict[str, torch.Tensor] = {}
    collections: dict[str, list[str]] = {}
    for collection in WEIGHT_COLLECTIONS:
        if collection in checkpoint:
            weights = checkpoint.pop(collection)
            collections[collection] = list(weights)
            prefix = "" if collection == "state_dict" else f"{collection}:"  # fit's names as before
            tensors |= {prefix + name: tensor for name, tensor in weights.items()}
    moments: dict[str, list] = {}
    for i, optimizer in enumerate(_optimizer_states(checkpoint)):
        if exact:
            for param, state in optimizer["state"].items():
                for key, value in state.items():
                    tensors[f"moments:{i}:{param}:{key}"] = value
                moments.setdefault(str(i), []).append([param, list(state)])
        optimizer["state"] = {}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size, dtypes, aliases, stored_at = 0, {}, {}, {}
    for name, tensor in tensors.items():
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if where in stored_at:  # tied weights (embedding and head) share one storage
            aliases[name] = stored_at[where]
            continue
        stored_at[where], dtypes[name] = name, tensor.dtype
        small = tensor.to(torch.bfloat16) if tensor.is_floating_point() and not exact else tensor
        nbytes = small.numel() * small.element_size() + _PER_TENSOR_BYTES
        if nbytes > max_bytes:
            raise CheckpointError(f"{name} alone takes {nbytes / 2**20:.1f} MiB in {small.dtype}, over the "
                                  f"{max_bytes / 2**20:g} MiB per file; raise the limit")
        if size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name], size = small.contiguous(), size + nbytes
    out_dir = Path(out_dir)
    files = [f"weights.{i:02d}.pt" for i in range(len(shards))]
    state = {"checkpoint": checkpoint, "collections": collections, "moments": moments, "dtypes": dtypes,
             "aliases": aliases, "shards": files}
    written = []
    for name, payload in [*zip(files, shards), (STATE_FILE, state)]:
        AtomicCheckpointIO().save_checkpoint(payload, out_dir / name)
        if (out_dir / name).stat().st_size > max_bytes:
            raise CheckpointError(f"{out_dir / name} came out at {(out_dir / name).stat().st_size / 2**20:.1f} MiB, "
                                  f"over the {max_bytes / 2**20:g} MiB per file")
        written.append(out_dir / name)
    return written


def join_checkpoint(folder: str | Path, out: str | Path) -> Path:
    """The checkpoint of `split_checkpoint` again, weights back in their dtype (rounded through bf16 unless split
    `exact`) and Adam's moments fresh (or as they were, `exact`): `proxycomp fit --ckpt_path` and `proxycomp rl
    --resume` (as OUT/checkpoints/last.ckpt) resume from it at its step, schedule and data position, and
    `load_lm`, hence `proxycomp rl --ckpt`, reads it."""
    folder = Path(folder)
    if not (folder / STATE_FILE).is_file():
        raise CheckpointError(f"{folder} holds no {STATE_FILE}; pass the folder `proxycomp shards split` wrote")
    state = read_checkpoint(folder / STATE_FILE)
    tensors: dict[str, torch.Tensor] = {}
    for shard in state["shards"]:
        if not (folder / shard).is_file():
            raise CheckpointError(f"{folder / shard} is missing; carry every file `proxycomp shards split` wrote")
        tensors.update(read_checkpoint(folder / shard))
    tensors = {name: tensors[name].to(dtype) for name, dtype in state["dtypes"].items()}
    tensors |= {name: tensors[target] for name, target in state["aliases"].items()}
    checkpoint = state["checkpoint"]
    # Files of a split from before RL checkpoints had collections: their one collection is fit's state_dict.
    collections = state["collections"] if "collections" in state else {"state_dict": state["order"]}
    for collection, names in collections.items():
        prefix = "" if collection == "state_dict" else f"{collection}:"
        checkpoint[collection] = {name: tensors[prefix + name] for name in names}
    optimizers = _optimizer_states(checkpoint)
    for i, params in state.get("moments", {}).items():
        optimizers[int(i)]["state"] = {param: {key: tensors[f"moments:{i}:{param}:{key}"] for key in keys}
                                       for param, keys in params}
    AtomicCheckpointIO().save_checkpoint(checkpoint, out)
    return Path(out)
