"""Bits per raw byte, the one metric every arm is compared on, and the `proxycomp eval-bpb` command.

Each document is read as its raw view ``<bos><raw> bytes </raw><eos>``; only raw-byte targets
count, so sentinels, BOS and EOS add nothing and the count of scored targets is the byte count.
Long documents are covered by sliding windows: every target is scored once, by the first window
that holds it beyond the previous window's end, so it gets at least seq_len - stride symbols of
context. Windows of several documents are packed into one row, separated by the document mask.
"""
from __future__ import annotations

import argparse
import glob
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from proxycomp.model import Transformer
from proxycomp.views import RawView
from proxycomp.vocab import PAD, RAW_OFFSET, is_raw_byte

IGNORE = -100  # target value for "nothing to predict here", as in the batch contract
LN2 = math.log(2)


class DataPathError(ValueError):
    """The documents to evaluate cannot be found."""


def symbol_nats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy in nats per target, flattened; 0 where the target is IGNORE."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE, reduction="none")


def byte_nats(nats: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed nats over raw-byte targets and how many there are (bits per byte = sum / ln 2 / count)."""
    mask = is_raw_byte(targets.flatten())
    return (nats * mask).sum(), mask.sum()


@dataclass
class BpbResult:
    bits_per_byte: float
    bytes: int
    documents: int


def sliding_windows(symbols: Sequence[int], seq_len: int, stride: int) -> Iterator[tuple[list[int], list[int]]]:
    """(inputs, targets) windows over one document; targets scored by an earlier window are IGNORE."""
    last = len(symbols) - 1  # index of the last target
    start, scored_until = 0, 0
    while True:
        end = min(start + seq_len, last)
        targets = [t if start + 1 + j > scored_until else IGNORE for j, t in enumerate(symbols[start + 1:end + 1])]
        yield list(symbols[start:end]), targets
        if end == last:
            return
        scored_until, start = end, start + stride


def packed_batches(
    pieces: Iterable[tuple[list[int], list[int]]], seq_len: int, batch_size: int
) -> Iterator[dict[str, torch.Tensor]]:
    """Pack windows in order into rows of seq_len, each window its own document, and rows into batches."""
    rows: list[list[tuple[list[int], list[int]]]] = []
    row: list[tuple[list[int], list[int]]] = []
    for piece in pieces:
        if sum(len(inputs) for inputs, _ in row) + len(piece[0]) > seq_len:
            rows.append(row)
            row = []
            if len(rows) == batch_size:
                yield _as_batch(rows, seq_len)
                rows = []
        row.append(piece)
    if row:
        rows.append(row)
    if rows:
        yield _as_batch(rows, seq_len)


def _as_batch(rows: list[list[tuple[list[int], list[int]]]], seq_len: int) -> dict[str, torch.Tensor]:
    batch = {
        "input_ids": torch.full((len(rows), seq_len), PAD, dtype=torch.long),
        "targets": torch.full((len(rows), seq_len), IGNORE, dtype=torch.long),
        "positions": torch.zeros(len(rows), seq_len, dtype=torch.long),
        # Padding at the tail is one more document, so no real symbol attends to it.
        "doc_ids": torch.zeros(len(rows), seq_len, dtype=torch.long),
    }
    for r, row in enumerate(rows):
        at = 0
        for doc, (inputs, targets) in enumerate(row):
            span = slice(at, at + len(inputs))
            batch["input_ids"][r, span] = torch.tensor(inputs)
            batch["targets"][r, span] = torch.tensor(targets)
            batch["positions"][r, span] = torch.arange(len(inputs))
            batch["doc_ids"][r, span] = doc
            at += len(inputs)
        batch["doc_ids"][r, at:] = len(row)
    return batch


@torch.no_grad()
def evaluate_bpb(
    model: Transformer, documents: Sequence[bytes], seq_len: int, stride: int, batch_size: int = 8
) -> BpbResult:
    """Bits per raw byte of `model` on `documents` (each one a whole file)."""
    if not 1 <= stride <= seq_len:
        raise ValueError(f"stride must lie in [1, seq_len={seq_len}], got {stride}")
    device = next(model.parameters()).device
    raw = RawView(RAW_OFFSET)
    pieces = (w for doc in documents if doc for w in sliding_windows(raw.serialize(doc), seq_len, stride))
    was_training = model.training
    model.eval()
    nats_sum, count = torch.zeros((), dtype=torch.float64), 0
    for batch in packed_batches(pieces, seq_len, batch_size):
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(batch["input_ids"], batch["positions"], batch["doc_ids"])
        nats, n = byte_nats(symbol_nats(logits, batch["targets"]), batch["targets"])
        nats_sum += nats.double().cpu()
        count += int(n)
    model.train(was_training)
    if count == 0:
        raise DataPathError("the documents hold no bytes to evaluate")
    return BpbResult(float(nats_sum) / LN2 / count, count, sum(1 for d in documents if d))


def read_documents(spec: str, pattern: str = "**/*.py") -> list[bytes]:
    """The files named by `spec`: one file, every file under a folder matching `pattern`, or a glob."""
    path = Path(spec)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.glob(pattern) if p.is_file())
    else:
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
    if not files:
        where = f"no file under {spec} matches {pattern!r}" if path.is_dir() else f"{spec} is no file, folder or matching glob"
        raise DataPathError(f"--data: {where}; pass a file, a folder of sources or a quoted glob such as 'src/**/*.py'")
    return [f.read_bytes() for f in files]


def main(argv: Sequence[str]) -> int:
    from proxycomp.checkpoint import load_lm  # Lightning is slow to import; keep it off the library path

    parser = argparse.ArgumentParser(prog="proxycomp eval-bpb", description="Bits per raw byte of a checkpoint.")
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `proxycomp fit`")
    parser.add_argument("--data", required=True, help="a file, a folder (see --glob) or a quoted glob")
    parser.add_argument("--glob", default="**/*.py", help="files to read under a folder (default **/*.py)")
    parser.add_argument("--seq-len", type=int, default=None, help="window length (default: the model's max_seq_len)")
    parser.add_argument("--stride", type=int, default=None, help="window step (default: half the window)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    documents = read_documents(args.data, args.glob)
    model = load_lm(args.ckpt, map_location=args.device).model
    seq_len = args.seq_len or model.config.max_seq_len
    stride = args.stride or max(1, seq_len // 2)
    if seq_len < 2 or not 1 <= stride <= seq_len:
        parser.error(f"need --seq-len >= 2 and 1 <= --stride <= --seq-len, got {seq_len} and {stride}")
    result = evaluate_bpb(model, documents, seq_len, stride, args.batch_size)
    print(
        f"bits per byte: {result.bits_per_byte:.4f} over {result.bytes} bytes in {result.documents} documents "
        f"(seq_len {seq_len}, stride {stride})"
    )
    return 0
