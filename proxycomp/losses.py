"""Cross-entropy in nats per target, and the share of it on raw bytes: the training loss and every
bits-per-byte figure (validation, `proxycomp eval-bpb`, the comparison) are sums of these."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from proxycomp.vocab import is_raw_byte

IGNORE_INDEX = -100  # target value for "nothing to predict here" in every batch
LN2 = math.log(2)


def symbol_nats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy in nats per target, flattened; 0 where the target is IGNORE_INDEX."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="none")


def restricted_nats(logits: torch.Tensor, targets: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """`symbol_nats` with the softmax renormalized over the `allowed` ids; 0 where the target is not one of them."""
    index = torch.full((logits.shape[-1],), IGNORE_INDEX, dtype=torch.long, device=logits.device)
    index[allowed] = torch.arange(len(allowed), device=logits.device)
    local = torch.where(targets == IGNORE_INDEX, IGNORE_INDEX, index[targets.clamp(min=0)])
    return symbol_nats(logits[..., allowed], local)


def batch_nats(model: Callable[..., torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """`symbol_nats` of a packed batch (input_ids, positions, doc_ids, targets) under `model`."""
    return symbol_nats(model(batch["input_ids"], batch["positions"], batch["doc_ids"]), batch["targets"])


def byte_nats(nats: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed nats over raw-byte targets and how many there are (bits per byte = sum / ln 2 / count)."""
    mask = is_raw_byte(targets.flatten())
    return (nats * mask).sum(), mask.sum()
