"""Which view(s) each document gets: the paper's r schedule and its two mixing modes.

`sentinel`: each document appears in one view, compressed with probability r.
`translation_random`: a document may appear as both views in one ``<bos> … <eos>`` context, in random
order. Pairing adds raw views, so the draw is recalibrated to keep r the fraction of compressed views
(as the paper's code does): for r > 0.5 every raw document is paired and a document is compressed-only
with p = 2 - 1/r; otherwise every compressed document is paired and p = r / (1 - r). A paired document too long
for half a window is paired chunk by chunk (proxycomp.data.pairing).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proxycomp.errors import UserError

SCHEDULES = ("paper", "sentinel", "byte", "tokens")
SENTINEL, TRANSLATION = "sentinel", "translation_random"


class ScheduleError(UserError):
    pass


@dataclass(frozen=True)
class MixingSchedule:
    """Which views each document gets, step by step.

    Args:
        kind: paper (translation_random with r ramped r_start -> r_peak over the first warmup_frac of total_steps,
            then sentinel at r_peak), sentinel (r_peak throughout), byte (raw only) or tokens (every document in
            its one compressed view, r = 1: the tokenizer baseline)
        r_start: compressed share at step 0 of the paper schedule
        r_peak: compressed share after the warmup
        warmup_frac: share of total_steps in the paired (translation) warmup
        total_steps: the run's optimizer steps (linked from trainer.max_steps by the CLI)
        chunk_pairs: pair a long document as aligned chunks, each with both views in a context of at most half a
            window, so the views share windows (proxycomp.data.pairing); false: pair whole documents, as the paper's
            code does at its 32K context
    """

    kind: str = "paper"
    r_start: float = 0.4
    r_peak: float = 0.9
    warmup_frac: float = 0.2
    total_steps: int = 1000
    chunk_pairs: bool = True

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ScheduleError(f"unknown schedule {self.kind!r}; known: {', '.join(SCHEDULES)}")
        for name in ("r_start", "r_peak", "warmup_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ScheduleError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.total_steps < 1:
            raise ScheduleError(f"total_steps must be positive, got {self.total_steps}")

    def at(self, step: int) -> tuple[str, float]:
        """(mode, r) for a training step."""
        if self.kind == "byte":
            return SENTINEL, 0.0
        if self.kind == "tokens":
            return SENTINEL, 1.0
        warmup = self.warmup_frac * self.total_steps
        if self.kind == "sentinel" or step >= warmup:
            return SENTINEL, self.r_peak
        return TRANSLATION, self.r_start + (self.r_peak - self.r_start) * step / warmup


def compressed_only_probability(r: float) -> float:
    """The recalibrated per-document draw of translation mode (see the module docstring)."""
    return 2.0 - 1.0 / r if r > 0.5 else r / (1.0 - r)


def choose_views(mode: str, r: float, compressed: Sequence[str], rng: np.random.Generator) -> list[str]:
    """View names for one document, in context order: one name, or a raw/compressed pair."""
    if not compressed:
        return ["raw"]
    # Drawn unconditionally so one document consumes the same random numbers whatever the outcome.
    u_view, u_order = rng.random(), rng.random()
    name = compressed[int(rng.integers(len(compressed)))]
    if mode == SENTINEL:
        return [name] if u_view < r else ["raw"]
    if r == 0.0:
        return ["raw"]
    is_compressed = u_view < compressed_only_probability(r)
    if r > 0.5 and is_compressed:
        return [name]
    if r <= 0.5 and not is_compressed:
        return ["raw"]
    return ["raw", name] if u_order < 0.5 else [name, "raw"]
