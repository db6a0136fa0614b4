"""Turn-level reward-to-go for multi-turn episodes.

Each turn is evaluated and rewarded on its own; the return of turn t is G_t = r_t + γ·G_{t+1}, summed over
the turns the trajectory actually reached. The reference recipe uses γ = 1 (a turn is credited with every
later improvement it enabled); γ = 0 reduces to per-turn rewards.
"""
from __future__ import annotations

import torch

from ._checks import require_2d, require_bool, require_finite_where, require_same_shape


def check_turn_mask(turn_mask: torch.Tensor) -> None:
    """A trajectory that reached turn t reached every earlier turn: each row must be a prefix of True."""
    require_2d("turn_mask", turn_mask)
    require_bool("turn_mask", turn_mask)
    if (turn_mask[:, 1:] & ~turn_mask[:, :-1]).any():
        raise ValueError("turn_mask: each row must be True for a prefix of turns then False (no gaps)")


def reward_to_go(rewards: torch.Tensor, turn_mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Discounted reward-to-go per turn.

    Args:
        rewards: (n_traj, T) float, reward of each turn; ignored where the turn was not reached.
        turn_mask: (n_traj, T) bool, True where the trajectory reached turn t (a prefix per row).
        gamma: discount in [0, 1].

    Returns:
        (n_traj, T) float tensor G with G[:, t] = Σ_{t' ≥ t} γ^(t'-t) r[:, t'] on reached turns, 0 elsewhere.
    """
    require_2d("rewards", rewards)
    require_same_shape("turn_mask", turn_mask, "rewards", rewards)
    check_turn_mask(turn_mask)
    require_finite_where("rewards", rewards, turn_mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: must be in [0, 1], got {gamma}")
    n_turns = rewards.shape[1]
    r = torch.where(turn_mask, rewards, torch.zeros((), dtype=rewards.dtype, device=rewards.device))
    # discount[t, t'] = γ^(t'-t) for t' ≥ t, else 0; T is a handful of turns so the (T, T) matrix is free.
    steps = torch.arange(n_turns, device=rewards.device)
    lag = steps[None, :] - steps[:, None]
    gamma_t = torch.tensor(gamma, dtype=rewards.dtype, device=rewards.device)
    discount = torch.where(lag >= 0, gamma_t.pow(lag.clamp(min=0).to(rewards.dtype)), torch.zeros_like(gamma_t))
    return (r @ discount.T) * turn_mask
