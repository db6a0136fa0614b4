"""The validation curve of a comparison arm, scored the way its final score is (`proxycomp.scoring`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import Callback

from proxycomp.defaults import default_stride
from proxycomp.scoring import score_documents


def sample_documents(documents: Sequence[bytes], max_bytes: int | None, seed: int) -> list[bytes]:
    """Documents in a seeded random order while they fit in `max_bytes` (at least one); all of them when it is None.

    The held-out split lists documents in path order, so its first megabytes are a few packages; a seeded draw scores
    every arm on the same documents from all of them."""
    order = np.random.default_rng(seed).permutation(len(documents))
    out, total = [], 0
    for i in order:
        doc = documents[i]
        if max_bytes is not None and out and total + len(doc) > max_bytes:
            break
        out.append(doc)
        total += len(doc)
    return out


class ValBpbCurve(Callback):
    """Bits per raw byte every `every_n_steps` optimizer steps, in the arm's scored view (the data module's).

    Scored on `max_bytes` of held-out documents drawn with `seed` (`sample_documents`), at step 0 and after every k-th
    step (and the last).
    Points travel in the checkpoint, so a resumed run keeps its curve. Logged as ``compare/val_bpb``.
    """

    def __init__(self, every_n_steps: int, max_bytes: int = 200_000, stride: int | None = None, batch_size: int = 8,
                 seed: int = 0):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be positive, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.max_bytes = max_bytes
        self.stride = stride
        self.batch_size = batch_size
        self.seed = seed
        self.points: list[dict[str, float]] = []
        self._datamodule: Any = None
        self._documents: list[bytes] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._datamodule = trainer.datamodule
        self._documents = sample_documents([d.data for d in self._datamodule.corpus.val], self.max_bytes, self.seed)
        if trainer.global_step == 0 and not self.points:
            self._measure(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 or step == trainer.max_steps:
            self._measure(trainer, pl_module)

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = self._datamodule
        seq_len = dm.config.seq_len
        bpb = score_documents(pl_module.model, self._documents, seq_len, self.stride or default_stride(seq_len),
                              dm.scored_view, self.batch_size).bits_per_byte
        step = trainer.global_step
        self.points.append({"step": step, "val_bpb": bpb})
        for logger in trainer.loggers:
            logger.log_metrics({"compare/val_bpb": bpb}, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"points": list(self.points)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.points = list(state_dict["points"])
