"""Training/rollout mismatch correction.

The rollout engine (sampling kernels, KV cache, other precision) and the trainer's forward assign slightly
different log-probs to the same tokens, so a nominally on-policy batch is off-policy. Per token

    log ρ = logp_trainer - logp_rollout.

Two remedies, configured by :class:`MismatchConfig`:

- **Rejection** (the reference recipe): a trajectory's geometric-mean ratio ρ̄ = exp(mean log ρ over its
  valid tokens) must lie in [lower, upper], and no token may have ρ < veto_threshold; otherwise the whole
  trajectory is masked out. A trajectory may span several rows (one per turn) through ``traj_ids``.
- **Truncated importance sampling** (TIS): weights min(ρ, cap) per token, or per trajectory from the
  product of its token ratios, multiplied into the policy loss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ._checks import RLConfigError, require_2d, require_bool, require_same_shape


@dataclass(frozen=True)
class MismatchConfig:
    """Correction of the trainer/rollout log-prob mismatch (ρ = exp(logp_trainer - logp_rollout) per token).

    Args:
        rejection: geometric rejects a trajectory whose geometric-mean ratio ρ̄ leaves [lower, upper]; none keeps all
        lower: the lowest ρ̄ of a kept trajectory
        upper: the highest ρ̄ of a kept trajectory
        veto_threshold: a token with ρ below this rejects its trajectory; null: no veto
        tis: truncated importance sampling weights: none, token (min(ρ, cap) per token) or sequence (per trajectory)
        tis_cap: the cap of the TIS weights
        log_clamp: |log ρ| and |log ρ̄| are clamped to this before exp, so weights stay finite
    """

    rejection: Literal["geometric", "none"] = "geometric"
    lower: float = 0.999
    upper: float = 1.001
    veto_threshold: float | None = 1e-4
    tis: Literal["none", "token", "sequence"] = "none"
    tis_cap: float = 2.0
    log_clamp: float = 20.0

    def __post_init__(self) -> None:
        if self.rejection not in ("geometric", "none"):
            raise RLConfigError(f"MismatchConfig.rejection: expected 'geometric' or 'none', got {self.rejection!r}")
        if self.tis not in ("none", "token", "sequence"):
            raise RLConfigError(f"MismatchConfig.tis: expected 'none', 'token' or 'sequence', got {self.tis!r}")
        if not 0.0 < self.lower <= 1.0 <= self.upper:
            raise RLConfigError(f"MismatchConfig: need 0 < lower <= 1 <= upper, got lower={self.lower} "
                                f"upper={self.upper}")
        if self.veto_threshold is not None and not 0.0 < self.veto_threshold < 1.0:
            raise RLConfigError(f"MismatchConfig.veto_threshold: must be in (0, 1) or None, got {self.veto_threshold}")
        if self.tis_cap < 1.0:
            raise RLConfigError(f"MismatchConfig.tis_cap: must be >= 1, got {self.tis_cap}")
        if self.log_clamp <= 0.0:
            raise RLConfigError(f"MismatchConfig.log_clamp: must be > 0, got {self.log_clamp}")


@dataclass(frozen=True)
class MismatchResult:
    keep: torch.Tensor  # (B,) bool per row: False where its trajectory was rejected
    token_mask: torch.Tensor  # (B, L) bool: the input token mask with rejected rows cleared
    weights: torch.Tensor | None  # (B, L) detached TIS weights (0 on invalid tokens), None when TIS is off
    rho_bar: torch.Tensor  # (B,) geometric-mean ratio of each row's trajectory
    stats: dict[str, torch.Tensor]  # 0-dim tensors for logging


def correct_mismatch(
    logp_trainer: torch.Tensor,
    logp_rollout: torch.Tensor,
    token_mask: torch.Tensor,
    *,
    traj_ids: torch.Tensor | None = None,
    config: MismatchConfig = MismatchConfig(),
) -> MismatchResult:
    """Reject and/or reweight rows whose trainer and rollout log-probs disagree.

    Args:
        logp_trainer, logp_rollout: (B, L) log-probs of the sampled tokens.
        token_mask: (B, L) bool, True on reply tokens.
        traj_ids: (B,) int; rows with the same id form one trajectory (default: each row its own).
    """
    require_2d("logp_trainer", logp_trainer)
    require_same_shape("logp_rollout", logp_rollout, "logp_trainer", logp_trainer)
    require_same_shape("token_mask", token_mask, "logp_trainer", logp_trainer)
    require_bool("token_mask", token_mask)
    n_rows = logp_trainer.shape[0]
    if traj_ids is None:
        inverse = torch.arange(n_rows, device=logp_trainer.device)
    else:
        if traj_ids.shape != (n_rows,) or traj_ids.is_floating_point():
            raise ValueError(f"traj_ids: expected an integer tensor of shape ({n_rows},), got {traj_ids.dtype} "
                             f"{tuple(traj_ids.shape)}")
        inverse = torch.unique(traj_ids, return_inverse=True)[1]
    n_traj = int(inverse.max()) + 1 if n_rows else 0

    with torch.no_grad():
        # Ratios in at least fp32: a bf16 log-prob difference cannot resolve the 1e-3 rejection band.
        compute_dtype = torch.promote_types(logp_trainer.dtype, torch.float32)
        raw = (logp_trainer.to(compute_dtype) - logp_rollout.to(compute_dtype)).masked_fill(~token_mask, 0.0)
        log_ratio = raw.clamp(-config.log_clamp, config.log_clamp)

        def per_traj(row_values: torch.Tensor) -> torch.Tensor:
            return row_values.new_zeros(n_traj).index_add_(0, inverse, row_values)

        tokens = per_traj(token_mask.sum(dim=1).to(compute_dtype))
        log_sum = per_traj(log_ratio.sum(dim=1))
        log_rho_bar = (log_sum / tokens.clamp(min=1)).clamp(-config.log_clamp, config.log_clamp)
        rho_bar = log_rho_bar.exp()
        has_tokens = tokens > 0

        in_bounds = (rho_bar >= config.lower) & (rho_bar <= config.upper)
        bound_ok = in_bounds if config.rejection == "geometric" else torch.ones_like(in_bounds)
        if config.veto_threshold is None:
            vetoed = torch.zeros_like(in_bounds)
        else:
            low_token = token_mask & (raw < math.log(config.veto_threshold))  # unclamped: tiny thresholds work
            vetoed = per_traj(low_token.any(dim=1).to(compute_dtype)) > 0
        traj_keep = bound_ok & ~vetoed
        keep = traj_keep[inverse]

        weights = None
        if config.tis == "token":
            weights = log_ratio.exp().clamp(max=config.tis_cap)
        elif config.tis == "sequence":
            seq_log = log_sum.clamp(-config.log_clamp, config.log_clamp)[inverse]
            weights = seq_log.exp().clamp(max=config.tis_cap)[:, None].expand_as(log_ratio)
        if weights is not None:
            truncated = token_mask & (weights >= config.tis_cap)
            weights = torch.where(token_mask, weights, torch.zeros_like(weights))

        counted = has_tokens.sum().clamp(min=1)
        stats = {
            "mismatch/trajectories": has_tokens.sum(),
            "mismatch/rejection_rate": (has_tokens & ~traj_keep).sum() / counted,
            "mismatch/bound_rejection_rate": (has_tokens & ~in_bounds).sum() / counted,
            "mismatch/veto_count": (has_tokens & vetoed).sum(),
            "mismatch/rho_bar_mean": rho_bar[has_tokens].mean() if has_tokens.any() else rho_bar.new_ones(()),
            "mismatch/log_ratio_abs_mean": log_ratio.abs().sum() / token_mask.sum().clamp(min=1),
        }
        if weights is not None:
            stats["mismatch/tis_truncated_fraction"] = truncated.sum() / token_mask.sum().clamp(min=1)

    return MismatchResult(
        keep=keep,
        token_mask=token_mask & keep[:, None],
        weights=weights,
        rho_bar=rho_bar[inverse],
        stats=stats,
    )
