"""Intervals for differences of arms over training seeds: Student's t, paired where two arms share each seed's
initialization and stream (a proxy arm and its twins), Welch's where they do not. With a handful of seeds these are
the honest intervals; a bootstrap over three values is not."""
from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import mean, stdev

LEVEL = 0.95


def t_cdf(x: float, df: float) -> float:
    """Student's t distribution function, by Simpson's rule over the density from 0 (smooth for every df > 0)."""
    if x < 0:
        return 1.0 - t_cdf(-x, df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    steps = 2000
    h = x / steps
    inner = sum((4 if k % 2 else 2) * density(k * h) for k in range(1, steps))
    return 0.5 + h / 3 * (density(0.0) + inner + density(x))


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (0.5 < p < 1) of Student's t with `df` degrees of freedom, by bisection on `t_cdf`."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def paired_interval(a: dict[str, float], b: dict[str, float]) -> dict[str, float] | None:
    """Mean of a - b over the seeds both have, with its t interval (None under two common seeds: no spread)."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    half = t_quantile((1 + LEVEL) / 2, len(diffs) - 1) * stdev(diffs) / math.sqrt(len(diffs))
    m = mean(diffs)
    return {"mean": m, "low": m - half, "high": m + half, "seeds": len(diffs)}


def welch_interval(a: Sequence[float], b: Sequence[float]) -> dict[str, float] | None:
    """mean(a) - mean(b) with Welch's t interval (None unless both have two values or more)."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    se = math.sqrt(va + vb)
    m = mean(a) - mean(b)
    if se == 0:
        return {"mean": m, "low": m, "high": m, "seeds": min(len(a), len(b))}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile((1 + LEVEL) / 2, df) * se
    return {"mean": m, "low": m - half, "high": m + half, "seeds": min(len(a), len(b))}


def verdict(interval: dict[str, float] | None) -> str:
    """How a difference reads against its interval."""
    if interval is None:
        return "no interval (one seed)"
    if interval["low"] <= 0 <= interval["high"]:
        return "inside the noise"
    return "outside the noise"
