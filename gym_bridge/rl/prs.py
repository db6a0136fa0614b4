"""Profiling-based rejection sampling (PRS).

A correct kernel that does its real work in torch and only a trivial op in Triton ("lazy optimization")
earns a good speedup reward while teaching nothing. PRS drops such turns from the policy-gradient batch in
proportion to how little of the CUDA time the candidate's own Triton kernels cover:

    p_keep = clip((coverage - τ) / s, 0, 1)      for correct, non-hacked turns,

so coverage ≤ τ is always dropped and coverage ≥ τ + s always kept. Incorrect or hacked turns are always
kept (they carry the negative signal; a decoy kernel is flagged, hence kept, as KernelGYM treats decoys as
incorrect), and so are turns with unknown coverage (no profiler, e.g. on CPU). A partial kernel (torch compute
beside a real Triton kernel) is correct and unflagged, so its coverage decides. :func:`band` names why a turn
was kept or dropped, for the rollout log.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._checks import RLConfigError, require_bool, require_same_shape


@dataclass(frozen=True)
class PRSConfig:
    """Profiling-based rejection of correct turns whose Triton kernels cover little of the CUDA time.

    Args:
        threshold: τ, the coverage at or below which a correct turn is always dropped
        scale: s, the width of the linear ramp from always dropped (τ) to always kept (τ + s)
    """

    threshold: float = 0.3
    scale: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise RLConfigError(f"PRSConfig.threshold: must be in [0, 1], got {self.threshold}")
        if self.scale <= 0.0:
            raise RLConfigError(f"PRSConfig.scale: must be > 0, got {self.scale}")


@dataclass(frozen=True)
class PRSResult:
    keep: torch.Tensor  # bool, same shape as the inputs; False for rejected turns (and for non-turns)
    keep_prob: torch.Tensor  # float, the Bernoulli probability each turn was kept with
    stats: dict[str, torch.Tensor]  # 0-dim tensors for logging


def coverage_tensor(coverage: Sequence[float | None] | torch.Tensor) -> torch.Tensor:
    """Coverage values as a float64 tensor, None (unknown) as NaN; known values must lie in [0, 1]."""
    if isinstance(coverage, torch.Tensor):
        cov = coverage.to(torch.float64)
    else:
        cov = torch.tensor([float("nan") if c is None else float(c) for c in coverage], dtype=torch.float64)
    known = ~torch.isnan(cov)
    bad = known & ((cov < 0) | (cov > 1))
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"coverage{list(index)}: {cov[index].item()} is outside [0, 1]; pass None if unknown")
    return cov


def keep_probability(
    correct: torch.Tensor, hacked: torch.Tensor, coverage: torch.Tensor, config: PRSConfig = PRSConfig()
) -> torch.Tensor:
    """Elementwise keep probability; ``coverage`` holds NaN where unknown."""
    ramp = ((coverage - config.threshold) / config.scale).clamp(0.0, 1.0)
    subject = correct & ~hacked & ~torch.isnan(coverage)
    return torch.where(subject, ramp, torch.ones_like(ramp))


def profiling_rejection(
    correct: Sequence[bool] | torch.Tensor,
    hacked: Sequence[bool] | torch.Tensor,
    coverage: Sequence[float | None] | torch.Tensor,
    *,
    turn_mask: torch.Tensor | None = None,
    config: PRSConfig = PRSConfig(),
    generator: torch.Generator | None = None,
) -> PRSResult:
    """Draw the PRS keep mask for a batch of turns (any shape; flat lists or (n_traj, T) tensors).

    Args:
        correct, hacked: bool per turn.
        coverage: Triton share of CUDA time per turn, None/NaN where unknown.
        turn_mask: bool, True where the turn exists; non-turns come back as keep=False and are not counted.
        generator: seeded torch.Generator for reproducible draws.
    """
    correct_t = torch.as_tensor(correct, dtype=torch.bool)
    hacked_t = torch.as_tensor(hacked, dtype=torch.bool)
    cov = coverage_tensor(coverage)
    require_same_shape("hacked", hacked_t, "correct", correct_t)
    require_same_shape("coverage", cov, "correct", correct_t)
    valid = torch.ones_like(correct_t) if turn_mask is None else turn_mask
    require_same_shape("turn_mask", valid, "correct", correct_t)
    require_bool("turn_mask", valid)

    prob = keep_probability(correct_t, hacked_t, cov, config)
    draw = torch.rand(prob.shape, dtype=torch.float64, generator=generator)
    keep = (draw < prob) & valid
    prob = torch.where(valid, prob, torch.zeros_like(prob))

    n_turns = valid.sum()
    subject = valid & correct_t & ~hacked_t & ~torch.isnan(cov)
    rejected = valid & ~keep
    stats = {
        "prs/turns": n_turns,
        "prs/subject_turns": subject.sum(),
        "prs/unknown_coverage_turns": (valid & torch.isnan(cov)).sum(),
        "prs/rejected_turns": rejected.sum(),
        "prs/rejected_below_threshold": (rejected & (cov <= config.threshold)).sum(),
        "prs/rejected_in_ramp": (rejected & (cov > config.threshold)).sum(),
        "prs/rejection_rate": rejected.sum() / n_turns.clamp(min=1),
        "prs/subject_rejection_rate": rejected.sum() / subject.sum().clamp(min=1),
        "prs/subject_coverage_mean": cov[subject].mean() if subject.any() else torch.tensor(float("nan")),
    }
    return PRSResult(keep=keep, keep_prob=prob, stats=stats)


def band(correct: bool, hacked: bool, coverage: float | None, config: PRSConfig = PRSConfig()) -> str:
    """Why PRS kept or dropped one turn: ``not_subject`` (incorrect or flagged: kept), ``unknown_coverage``
    (not profiled: kept), ``below_threshold`` (coverage ≤ τ: dropped), ``ramp`` (τ < coverage < τ + s: kept
    with probability (coverage - τ)/s) or ``above_ramp`` (kept)."""
    if not correct or hacked:
        return "not_subject"
    if coverage is None or math.isnan(coverage):
        return "unknown_coverage"
    if coverage <= config.threshold:
        return "below_threshold"
    return "ramp" if coverage < config.threshold + config.scale else "above_ramp"
