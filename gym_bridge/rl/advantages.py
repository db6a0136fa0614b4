"""Advantage estimators for multi-turn kernel RL, looked up by name (the verl registry habit).

Every estimator has the signature ``fn(returns, turn_mask, group_ids, **options) -> advantages``:

- ``returns``: (n, T) float reward-to-go per turn (see :func:`returns.reward_to_go`);
- ``turn_mask``: (n, T) bool, True where turn t of trajectory i counts: reached, and not masked as void
  (:func:`episode.void_turn_mask`), so a row may have gaps;
- ``group_ids``: (n,) int, the prompt each trajectory was sampled for (its group).

Turn-level estimators group samples by (prompt, turn) over the turns that count (every trajectory of a rollout
plays all its turns, so N_t shrinks only where void turns are masked or a batch mixes lengths). Advantages are 0
on turns that do not count; the trainer broadcasts each turn's advantage to all tokens of that turn's reply.
"""
from __future__ import annotations

from typing import Callable

import torch

from ._checks import require_2d, require_bool, require_finite_where, require_same_shape

# fn(returns, turn_mask, group_ids, **estimator_options) -> advantages
AdvantageEstimator = Callable[..., torch.Tensor]


_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_estimator(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Decorator adding an estimator under ``name``; a second registration of the same name is an error."""

    def add(fn: AdvantageEstimator) -> AdvantageEstimator:
        if name in _ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _ESTIMATORS[name] = fn
        return fn

    return add


def get_estimator(name: str) -> AdvantageEstimator:
    try:
        return _ESTIMATORS[name]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(_ESTIMATORS))}") from None


def estimator_names() -> list[str]:
    return sorted(_ESTIMATORS)


def _check_inputs(returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor) -> None:
    require_2d("returns", returns)
    require_same_shape("turn_mask", turn_mask, "returns", returns)
    require_bool("turn_mask", turn_mask)
    if group_ids.dim() != 1 or group_ids.shape[0] != returns.shape[0]:
        raise ValueError(f"group_ids: expected shape ({returns.shape[0]},), got {tuple(group_ids.shape)}")
    if group_ids.is_floating_point() or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids: expected an integer tensor, got {group_ids.dtype}")
    require_finite_where("returns", returns, turn_mask)


def _cells(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Each row's group index in 0..n_groups-1, and n_groups."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(inverse.max()) + 1 if inverse.numel() else 0


def group_sizes(turn_mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """N_t of every (group, turn) cell that has a member: how many samples each turn-level baseline is over."""
    inverse, n_groups = _cells(group_ids)
    counts = turn_mask.new_zeros((n_groups, turn_mask.shape[1]), dtype=torch.long)
    counts.index_add_(0, inverse, turn_mask.long())
    return counts[counts > 0]


def _group_sums(
    values: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element (sum, count) of the valid values in its (group, column) cell."""
    inverse, n_groups = _cells(group_ids)
    m = mask.to(values.dtype)
    v = torch.where(mask, values, torch.zeros_like(values))  # unreached turns may hold anything, even NaN
    shape = (n_groups, values.shape[1])
    sums = values.new_zeros(shape).index_add_(0, inverse, v)
    counts = values.new_zeros(shape).index_add_(0, inverse, m)
    return sums[inverse], counts[inverse]


def _leave_one_out(values: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """G minus the mean of the *other* valid members; a singleton keeps its own value (baseline 0)."""
    sums, counts = _group_sums(values, mask, group_ids)
    others = (counts - 1).clamp(min=1)
    baseline = torch.where(counts > 1, (sums - values) / others, torch.zeros_like(values))
    return torch.where(mask, values - baseline, torch.zeros_like(values))


@register_estimator("trloo")
def trloo(returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Turn-level leave-one-out: A = N_t/(N_t-1)·(G - mean_t) = G - mean of the other N_t-1 returns.

    The baseline excludes the sample itself, so it is independent of the sample's action and the policy
    gradient stays unbiased (GRPO's self-inclusive mean shrinks it by (N_t-1)/N_t). N_t = 1 gives A = G.
    """
    _check_inputs(returns, turn_mask, group_ids)
    return _leave_one_out(returns, turn_mask, group_ids)


@register_estimator("grpo")
def grpo(
    returns: torch.Tensor,
    turn_mask: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    std_normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Turn-level GRPO as KernelGYM's multi-turn baseline: A = G - mean_t, the mean taken over the group
    *including* the sample, no std division. So for N_t > 1 it is TRLOO scaled by (N_t-1)/N_t, and a group of
    one keeps A = G, as in TRLOO (verl's GRPO gives a singleton mean 0 and std 1).

    ``std_normalize`` divides by the group's Bessel-corrected std + eps (verl's ``norm_adv_by_std_in_grpo``).
    """
    _check_inputs(returns, turn_mask, group_ids)
    if eps <= 0:
        raise ValueError(f"eps: must be > 0, got {eps}")
    sums, counts = _group_sums(returns, turn_mask, group_ids)
    mean = torch.where(counts > 1, sums / counts.clamp(min=1), torch.zeros_like(sums))
    centered = torch.where(turn_mask, returns - mean, torch.zeros_like(returns))
    if not std_normalize:
        return centered
    # Two passes (mean, then squared deviations) avoid the cancellation of Σx² - n·mean².
    squared_dev, _ = _group_sums(centered * centered, turn_mask, group_ids)
    std = torch.where(counts > 1, (squared_dev / (counts - 1).clamp(min=1)).sqrt(), torch.ones_like(counts))
    return centered / (std + eps)


@register_estimator("rloo")
def rloo(returns: torch.Tensor, turn_mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Trajectory-level RLOO: leave-one-out on the whole-trajectory return G_0, broadcast to its counted turns.
    A trajectory whose turn 0 does not count (all masked, e.g. errored) is out of its group."""
    _check_inputs(returns, turn_mask, group_ids)
    if (turn_mask.any(dim=1) & ~turn_mask[:, 0]).any():
        raise ValueError("turn_mask: a trajectory with a counted turn must count turn 0 for rloo (its return is G_0)")
    traj_adv = _leave_one_out(returns[:, :1], turn_mask[:, :1], group_ids)
    return torch.where(turn_mask, traj_adv.expand_as(returns), torch.zeros_like(returns))
