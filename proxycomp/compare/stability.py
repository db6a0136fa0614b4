"""How a compressor behaves on the corpus: its ratio, and how much its output changes under a small edit.

Stability is the normalized edit distance between the view of a document and the view of the same
document with a fraction of its characters deleted (the paper's measure: the tokenizer is stable, gzip's
stream is rewritten almost entirely). The edit distance is exact (Levenshtein, unit costs), computed with
the bit-parallel algorithm of Myers/Hyyrö on Python integers: O(n·m/64) word operations.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from proxycomp.views import View


def levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
    """Edit distance (insertions, deletions, substitutions) between two symbol sequences."""
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    match: dict[int, int] = {}  # symbol -> bit mask of its positions in b
    for i, symbol in enumerate(b):
        match[symbol] = match.get(symbol, 0) | (1 << i)
    mask, top = (1 << m) - 1, 1 << (m - 1)
    pv, mv, score = mask, 0, m  # vertical +1/-1 deltas of the current column; score = D[m][j]
    for symbol in a:
        eq = match.get(symbol, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        # Row 0 grows by one per column (D[0][j] = j), hence the 1 shifted in.
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
    return score


def normalized_edit_distance(a: Sequence[int], b: Sequence[int]) -> float:
    return levenshtein(a, b) / max(len(a), len(b), 1)


def delete_characters(data: bytes, rate: float, seed: int) -> bytes:
    """`data` with round(rate · n) of its n characters deleted at seeded random positions.

    Characters, not bytes: a multi-byte UTF-8 character goes as a whole (invalid bytes count as one each).
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"deletion rate must be in [0, 1), got {rate}")
    text = data.decode("utf-8", errors="surrogateescape")
    drop = np.random.default_rng(seed).choice(len(text), size=round(rate * len(text)), replace=False)
    keep = np.ones(len(text), dtype=bool)
    keep[drop] = False
    return "".join(c for c, k in zip(text, keep) if k).encode("utf-8", errors="surrogateescape")


def compressor_stats(
    views: Mapping[str, View], ratio_documents: Sequence[bytes], stability_documents: Sequence[bytes],
    rate: float, seed: int,
) -> dict[str, dict[str, float]]:
    """Per view: raw bytes per symbol over `ratio_documents`, and the mean normalized edit distance of the
    view under `rate` character deletion over `stability_documents` (document k perturbed with seed + k)."""
    if not ratio_documents or not stability_documents:
        raise ValueError("compressor statistics need at least one document for the ratio and one for stability")
    n_bytes = sum(len(d) for d in ratio_documents)
    perturbed = [delete_characters(d, rate, seed + k) for k, d in enumerate(stability_documents)]
    stats = {}
    for name, view in views.items():
        symbols = sum(len(view.encode_array(d)) for d in ratio_documents)
        distances = [
            normalized_edit_distance(view.encode(d), view.encode(p)) for d, p in zip(stability_documents, perturbed)
        ]
        stats[name] = {"bytes_per_symbol": n_bytes / symbols, "edit_distance": float(np.mean(distances)),
                       "documents": len(stability_documents)}
    return stats
