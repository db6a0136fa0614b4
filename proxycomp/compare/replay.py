"""The raw-subset control: the raw views a proxy run trained on, replayed from its deterministic stream.

The proxy arm's data module is rebuilt with the same settings and tokenizer, and its DataLoader is run
for the proxy arm's number of steps: the same batches the proxy arm saw. Row k of a logical worker's batches
is window after window of one stream, so concatenating that row's inputs gives the stream back; every
``<raw> … </raw>`` span in it (a raw-only document, or the raw half of a paired one) becomes a raw
document ``<bos><raw> … </raw><eos>`` of the replay, in the order seen. A span cut by the last step
keeps the part that was seen.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from proxycomp.data import CURSOR_KEY
from proxycomp.views import serialize_views
from proxycomp.views.base import SYMBOL_DTYPE
from proxycomp.vocab import SENTINELS

RAW_OPEN, RAW_CLOSE = SENTINELS["raw"]


def raw_views_seen(batches: Iterable[dict[str, torch.Tensor]], steps: int) -> np.ndarray:
    """The raw views of the first `steps` training batches, re-serialized end to end (int32 symbols)."""
    # per (logical worker, row): its stream from the first unclosed <raw> on
    pending: dict[tuple[int, int], np.ndarray] = {}
    documents: list[np.ndarray] = []
    seen = 0
    for batch in batches:
        if seen == steps:
            break
        seen += 1
        worker = int(batch[CURSOR_KEY][0])
        for row, inputs in enumerate(batch["input_ids"].numpy().astype(SYMBOL_DTYPE)):
            key = (worker, row)
            stream = np.concatenate([pending.get(key, np.zeros(0, SYMBOL_DTYPE)), inputs])
            opens, closes = np.flatnonzero(stream == RAW_OPEN), np.flatnonzero(stream == RAW_CLOSE)
            pending[key] = np.zeros(0, SYMBOL_DTYPE)
            for start in opens:
                end = closes[np.searchsorted(closes, start)] if len(closes) and closes[-1] > start else None
                if end is None:
                    pending[key] = stream[start:]
                    break
                documents.append(stream[start + 1:end])
    if seen < steps:
        raise ValueError(f"the stream ended after {seen} batches, before the {steps} to replay")
    documents += [tail[1:] for tail in pending.values() if len(tail) > 1]
    if not documents:
        raise ValueError(f"the first {steps} batches hold no raw view to replay")
    return np.concatenate([serialize_views([("raw", body)]) for body in documents])
