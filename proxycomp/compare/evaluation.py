"""Every arm is scored in bits per raw byte on held-out documents, including the tokenizer baseline.

Byte-trained arms go through `proxycomp.evaluate.evaluate_bpb` (raw view, raw-byte targets only). The
tokenizer baseline never saw raw bytes, so it reads each document in its own view
``<bos><spm> tokens </spm><eos>`` with ``<bos><spm>`` given as the prompt (as ``<bos><raw>`` is for bytes),
and every later target counts: the tokens, the closing sentinel and ``<eos>``. The token arm thus pays for
ending the document, which the byte arms' score leaves out (at most a few bits per document). Bits are
divided by the document's UTF-8 bytes in both cases.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from proxycomp.evaluate import IGNORE, LN2, BpbResult, evaluate_bpb, packed_batches, sliding_windows, symbol_nats
from proxycomp.model import Transformer
from proxycomp.views import View
from proxycomp.vocab import SENTINELS


@torch.no_grad()
def view_bpb(model: Transformer, documents: Sequence[bytes], view: View, seq_len: int, stride: int,
             batch_size: int = 8) -> BpbResult:
    """Bits per raw byte of a model that reads `view`: all targets after ``<bos><open>``, over the documents' bytes."""
    if not 1 <= stride <= seq_len:
        raise ValueError(f"stride must lie in [1, seq_len={seq_len}], got {stride}")
    open_id = SENTINELS[view.name][0]

    def pieces() -> Iterator[tuple[list[int], list[int]]]:
        for doc in documents:
            for inputs, targets in sliding_windows(view.serialize(doc), seq_len, stride):
                yield inputs, [IGNORE if t == open_id else t for t in targets]

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats_sum = torch.zeros((), dtype=torch.float64)
    for batch in packed_batches(pieces(), seq_len, batch_size):
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(batch["input_ids"], batch["positions"], batch["doc_ids"])
        nats_sum += symbol_nats(logits, batch["targets"]).sum().double().cpu()
    model.train(was_training)
    n_bytes = sum(len(d) for d in documents)
    if n_bytes == 0:
        raise ValueError("the documents hold no bytes to evaluate")
    return BpbResult(float(nats_sum) / LN2 / n_bytes, n_bytes, sum(1 for d in documents if d))


@dataclass(frozen=True)
class Scorer:
    """Scores a model in bits per raw byte: raw bytes when `view` is None, else in that view."""

    seq_len: int
    stride: int
    batch_size: int = 8
    view: View | None = None

    def __call__(self, model: Transformer, documents: Sequence[bytes]) -> BpbResult:
        if self.view is None:
            return evaluate_bpb(model, documents, self.seq_len, self.stride, self.batch_size)
        return view_bpb(model, documents, self.view, self.seq_len, self.stride, self.batch_size)


def scorer_for(datamodule: Any, stride: int | None = None, batch_size: int = 8) -> Scorer:
    """The scorer for a `ProxyDataModule`'s arm: its compressed view under the `tokens` schedule, raw otherwise."""
    seq_len = datamodule.hparams.seq_len
    view = None
    if datamodule.schedule.kind == "tokens":
        name = next(n for n in datamodule.view_config.names if n != "raw")
        view = datamodule.view_config.build(datamodule.spm_model)[name]
    return Scorer(seq_len, stride or max(1, seq_len // 2), batch_size, view)


def leading_documents(documents: Sequence[bytes], max_bytes: int | None) -> list[bytes]:
    """Documents in order while they fit in `max_bytes` (at least one); all of them when it is None."""
    if max_bytes is None:
        return list(documents)
    out, total = [], 0
    for doc in documents:
        if out and total + len(doc) > max_bytes:
            break
        out.append(doc)
        total += len(doc)
    return out


class ValBpbCurve(Callback):
    """The validation curve of a comparison arm: bits per raw byte every `every_n_steps` optimizer steps.

    Scored with the arm's final metric on the first `max_bytes` of the held-out split, at step 0 and after
    every k-th step (and the last). Points travel in the checkpoint, so a resumed run keeps its curve.
    Logged as ``compare/val_bpb`` to the trainer's loggers.
    """

    def __init__(self, every_n_steps: int, max_bytes: int = 200_000, stride: int | None = None, batch_size: int = 8):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be positive, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.max_bytes = max_bytes
        self.stride = stride
        self.batch_size = batch_size
        self.points: list[dict[str, float]] = []
        self._scorer: Scorer | None = None
        self._documents: list[bytes] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        self._scorer = scorer_for(datamodule, self.stride, self.batch_size)
        self._documents = leading_documents([d.data for d in datamodule.corpus.val], self.max_bytes)
        if trainer.global_step == 0 and not self.points:
            self._measure(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 or step == trainer.max_steps:
            self._measure(trainer, pl_module)

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bpb = self._scorer(pl_module.model, self._documents).bits_per_byte
        step = trainer.global_step
        self.points.append({"step": step, "val_bpb": bpb})
        for logger in trainer.loggers:
            logger.log_metrics({"compare/val_bpb": bpb}, step=step)

    def state_dict(self) -> dict[str, Any]:
        return {"points": list(self.points)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.points = list(state_dict["points"])
