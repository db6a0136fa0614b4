"""Paired (translation) contexts of long documents: aligned chunks whose views fit half a window.

The paper's code puts both views of a paired document in one ``<bos> … <eos>`` context. At its 32K context most
code files fit; at 2048 they mostly do not (a 15 KB file is ~20K symbols as raw + spm), so the two views of a
document hardly ever share a window. Here a paired document whose context is longer than half a window is cut
into chunks at line ends, and each chunk becomes a paired context of its own,
``<bos><raw> chunk </raw><spm> chunk' </spm><eos>``, with every view encoded from the chunk alone (a
SentencePiece chunk is tokenized as its own document, a zstd or brotli chunk is its own frame), so each chunk
round-trips exactly.

Why half a window (`max_pair_symbols`): if no context is longer than (seq_len + 2) // 2 symbols, every window of
seq_len + 1 symbols that falls inside a run of them holds at least one whole pair (the first context that starts
in the window starts within its first half, so it also ends inside). A deliberate difference from the paper's
code, which pairs whole documents only; `MixingSchedule.chunk_pairs=False` restores that.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from proxycomp.views import View, serialize_views
from proxycomp.vocab import BOS, EOS, SENTINELS

OPEN_IDS = frozenset(open_id for open_id, _ in SENTINELS.values())


def max_pair_symbols(seq_len: int) -> int:
    """The longest paired context that keeps a whole pair in every window inside a run of them."""
    return (seq_len + 2) // 2


def paired_contexts(data: bytes, views: Sequence[View], max_symbols: int) -> list[np.ndarray]:
    """`data` in every view of `views` (in context order), as contexts of at most `max_symbols` symbols: the
    whole document if it fits, else aligned chunks (a chunk whose single character does not fit goes over)."""

    def context(chunk: bytes) -> np.ndarray:
        return serialize_views([(view.name, view.encode_array(chunk)) for view in views])

    overhead = 2 + 2 * len(views)  # <bos>, <eos> and a sentinel pair per view
    if len(data) + overhead <= max_symbols and len(whole := context(data)) <= max_symbols:
        return [whole]
    contexts, pos = [], 0
    per_byte = float(len(views))  # context symbols per chunk byte: a safe guess, then the last chunk's figure
    room = max(1, max_symbols - overhead)
    while pos < len(data):
        end = _cut(data, pos, int(room / per_byte))
        ctx = context(data[pos:end])
        # Usually fits at once; otherwise shrink in proportion to the overshoot (every pass cuts at least a byte).
        while len(ctx) > max_symbols and (shorter := _cut(data, pos, int((end - pos) * room / len(ctx)))) < end:
            end, ctx = shorter, context(data[pos:shorter])
        per_byte = max(1.0, (len(ctx) - overhead) / (end - pos))
        contexts.append(ctx)
        pos = end
    return contexts


def _cut(data: bytes, pos: int, size: int) -> int:
    """End of a chunk of at most `size` bytes from `pos`: just after its last line end, else at a UTF-8 character
    boundary; at least one whole character."""
    end = pos + max(1, size)
    if end >= len(data):
        return len(data)
    newline = data.rfind(b"\n", pos, end)
    if newline >= 0:
        return newline + 1
    while end > pos + 1 and data[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte: back to its character's start
        end -= 1
    while end < len(data) and data[end] & 0xC0 == 0x80:  # a first character longer than `size`
        end += 1
    return end


def is_whole_pair(piece: np.ndarray) -> bool:
    """Whether a window piece is one whole paired context: ``<bos>``, two views with their sentinels, ``<eos>``."""
    return len(piece) > 1 and piece[0] == BOS and piece[-1] == EOS and np.isin(piece, list(OPEN_IDS)).sum() == 2
