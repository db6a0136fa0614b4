"""Bits per raw byte of a model on whole documents: the one scorer behind `proxycomp eval-bpb`, the comparison's
curves and its final scores.

Each document is read in the scored view, ``<bos><open> symbols <close><eos>``, with ``<bos><open>`` given as
the prompt. In the raw view only raw-byte targets count, so sentinels and EOS add nothing and the count of scored
targets is the byte count. The raw view is scored twice: with the full softmax, and with the softmax restricted
to what a raw-byte reply may hold (`raw_reply_ids`: raw bytes and the two raw stops, renormalized), as raw-byte
inference samples; a proxy model's mass on compressed ids is then not counted against it. A model that never
saw raw bytes (the tokenizer baseline) is scored in its own view: every target after the prompt counts (the
symbols, the closing sentinel and EOS, at most a few bits per document more than the raw view pays), over the
documents' UTF-8 bytes.

Long documents are covered by sliding windows: every target is scored once, by the first window that holds it
beyond the previous window's end, so it gets at least seq_len - stride symbols of context. Windows of several
documents share a row, packed by the data module's packer and kept apart by the document mask.
"""
from __future__ import annotations

import glob
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from proxycomp.data.packing import collate, pack_window
from proxycomp.errors import UserError
from proxycomp.losses import IGNORE_INDEX, LN2, restricted_nats, symbol_nats
from proxycomp.model import Transformer
from proxycomp.views import RawView, View
from proxycomp.vocab import RAW_OFFSET, is_raw_byte, raw_reply_ids


@dataclass
class BpbResult:
    bits_per_byte: float
    bytes: int
    documents: int
    raw_ids_bits_per_byte: float | None = None  # softmax over raw_reply_ids only (raw view)


def sliding_windows(symbols: np.ndarray, seq_len: int, stride: int) -> Iterator[tuple[np.ndarray, int]]:
    """(piece, scored_from) for each window over one serialized document: the piece is the window's inputs plus
    its last target, and its targets before `scored_from` are not scored (the prompt, or an earlier window's)."""
    last = len(symbols) - 1  # index of the last target
    start, scored_until = 0, 1  # the first target (<open> after <bos>) is part of the prompt
    while True:
        end = min(start + seq_len, last)
        yield symbols[start:end + 1], max(0, scored_until - start)
        if end == last:
            return
        scored_until, start = end, start + stride


def packed_batches(pieces: Iterable[tuple[np.ndarray, int]], seq_len: int,
                   batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Pieces in order, as many per row as fit (seq_len + 1 symbols, `pack_window`), rows into batches."""
    rows: list[dict[str, torch.Tensor]] = []
    row: list[tuple[np.ndarray, int]] = []
    for piece in pieces:
        if row and sum(len(p) for p, _ in row) + len(piece[0]) > seq_len + 1:
            rows.append(_pack(row, seq_len))
            row = []
            if len(rows) == batch_size:
                yield collate(rows)
                rows = []
        row.append(piece)
    if row:
        rows.append(_pack(row, seq_len))
    if rows:
        yield collate(rows)


def _pack(row: list[tuple[np.ndarray, int]], seq_len: int) -> dict[str, torch.Tensor]:
    return pack_window([p for p, _ in row], seq_len, scored_from=[s for _, s in row])


def read_documents(spec: str, pattern: str = "**/*.py", flag: str = "--data") -> list[bytes]:
    """The files named by `spec` (given as `flag`): one file, every file under a folder matching `pattern`, or a
    glob."""
    path = Path(spec)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.glob(pattern) if p.is_file())
    else:
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    if not files:
        where = (f"no file under {spec} matches {pattern!r}" if path.is_dir()
                 else f"{spec} is no file, folder or matching glob")
        raise UserError(f"{flag}: {where}; pass a file, a folder of sources or a quoted glob such as 'src/**/*.py'")
    return [f.read_bytes() for f in files]


@torch.no_grad()
def score_documents(model: Transformer, documents: Sequence[bytes], seq_len: int, stride: int,
                    view: View | None = None, batch_size: int = 8,
                    progress: Callable[[int], None] | None = None) -> BpbResult:
    """Bits per raw byte of `model` on `documents` (each a whole file), read in `view` (default: raw bytes).
    `progress`, if given, is called after each batch with the number of targets scored so far."""
    if not 1 <= stride <= seq_len:
        raise UserError(f"stride must lie in [1, seq_len={seq_len}], got {stride}")
    view = view or RawView(RAW_OFFSET)
    raw = isinstance(view, RawView)
    documents = [d for d in documents if d]
    pieces = (w for doc in documents for w in sliding_windows(np.asarray(view.serialize(doc)), seq_len, stride))
    device = next(model.parameters()).device
    allowed = torch.tensor(raw_reply_ids(model.config.vocab_size), device=device)
    was_training = model.training
    model.eval()
    nats_sum, raw_ids_nats_sum, scored_targets = 0.0, 0.0, 0
    for batch in packed_batches(pieces, seq_len, batch_size):
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(batch["input_ids"], batch["positions"], batch["doc_ids"])
        targets = batch["targets"].flatten()
        scored = is_raw_byte(targets) if raw else targets != IGNORE_INDEX
        nats_sum += float((symbol_nats(logits, batch["targets"]) * scored).sum())
        if raw:
            raw_ids_nats_sum += float((restricted_nats(logits, batch["targets"], allowed) * scored).sum())
        scored_targets += int(scored.sum())
        if progress is not None:
            progress(scored_targets)
    model.train(was_training)
    n_bytes = scored_targets if raw else sum(len(d) for d in documents)
    if n_bytes == 0:
        raise UserError("the documents hold no bytes to evaluate")
    return BpbResult(nats_sum / LN2 / n_bytes, n_bytes, len(documents),
                     raw_ids_nats_sum / LN2 / n_bytes if raw else None)
