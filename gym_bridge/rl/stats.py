"""Intervals for the held-out evaluation: a proportion's, a paired difference's, and the tasks a difference needs.

Episodes cluster by task (the samples of one task share its difficulty) and before/after, or two arms, are paired by
task. So a difference is measured over tasks: each task's proportion in one row minus its proportion in the other,
resampled by task (a percentile bootstrap), not as two independent binomials whose intervals are compared.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

Z95 = 1.959963984540054
RESAMPLES = 10_000


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: sound for small n and for p near 0 or 1, where the normal
    approximation is not. Episodes are taken as independent, which samples of one task are not quite: it describes
    one row, and `paired_bootstrap` compares two."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_bootstrap(first: Sequence[float], second: Sequence[float], weights: Sequence[float] | None = None,
                     resamples: int = RESAMPLES, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(difference, low, high): the weighted mean of per-task differences first[i] - second[i] (weights: episodes
    per task; equal by default), with the percentile interval of that mean over tasks resampled with replacement.
    Seeded, so a summary written twice says the same."""
    if len(first) != len(second) or not len(first):
        raise ValueError(f"paired_bootstrap: need the same tasks on both sides, got {len(first)} and {len(second)}")
    diffs = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    w = np.ones_like(diffs) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != diffs.shape or not (w > 0).all():
        raise ValueError(f"paired_bootstrap: need one positive weight per task, got {list(w)}")
    picks = np.random.default_rng(seed).integers(0, len(diffs), size=(resamples, len(diffs)))
    means = (w[picks] * diffs[picks]).sum(1) / w[picks].sum(1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float((w * diffs).sum() / w.sum()), float(low), float(high)


def tasks_needed(delta: float, sd: float, level: float = 0.95, power: float = 0.8) -> int:
    """Tasks for a paired difference of `delta` to exclude 0 with probability `power`, when per-task differences
    have standard deviation `sd` (normal approximation: n = ((z_level + z_power) sd / delta)^2)."""
    if not delta > 0 or not sd > 0:
        raise ValueError(f"tasks_needed: delta and sd must be positive, got {delta} and {sd}")
    z = NormalDist().inv_cdf((1 + level) / 2) + NormalDist().inv_cdf(power)
    return math.ceil((z * sd / delta) ** 2)


def task_difference_sd(p: float, samples_per_task: int, between_tasks_sd: float) -> float:
    """Standard deviation of one task's paired difference of proportions: the spread of the true per-task effect
    plus each side's binomial noise over `samples_per_task` episodes (the two sides sample apart)."""
    return math.sqrt(between_tasks_sd ** 2 + 2 * p * (1 - p) / samples_per_task)
