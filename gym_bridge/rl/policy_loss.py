"""Clipped policy-gradient loss with asymmetric and dual clipping, token-level inputs.

Per valid token, with ratio r = exp(logp_new - logp_old) and advantage A:

    l = max(-A·r, -A·clip(r, 1-ε_low, 1+ε_high))          (PPO; ε_high > ε_low lets rare tokens grow)
    l = min(l, -A·c)   where A < 0                        (dual clip: bounds the loss of a huge ratio)

optionally times an importance weight (TIS, see :mod:`mismatch`), aggregated by one of
:data:`AGGREGATIONS`, plus kl_coef · k3-KL to a reference policy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ._checks import RLConfigError, require_2d, require_same_shape

Aggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
_LOG_RATIO_LIMIT = 20.0  # exp() of larger log-ratios overflows fp32 for no useful gradient


@dataclass(frozen=True)
class PolicyLossConfig:
    """The clipped policy-gradient loss.

    Args:
        clip_low: ε_low, the ratio's lower clip is 1 - ε_low
        clip_high: ε_high, the ratio's upper clip is 1 + ε_high (above ε_low, rare tokens may grow)
        dual_clip: c > 1 bounds the loss of a negative-advantage token at -A·c; null: no dual clip
        aggregation: how token losses become one: token-mean, seq-mean-token-sum or seq-mean-token-mean
        kl_coef: weight of the k3 KL to the initial policy (> 0 keeps a frozen copy of it)
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    aggregation: Aggregation = "seq-mean-token-sum"
    kl_coef: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.clip_low < 1.0:
            raise RLConfigError(f"PolicyLossConfig.clip_low: must be in (0, 1), got {self.clip_low}")
        if self.clip_high <= 0.0:
            raise RLConfigError(f"PolicyLossConfig.clip_high: must be > 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise RLConfigError(f"PolicyLossConfig.dual_clip: must be > 1 or None, got {self.dual_clip}")
        if self.aggregation not in AGGREGATIONS:
            raise RLConfigError(f"PolicyLossConfig.aggregation: {self.aggregation!r} is not one of {AGGREGATIONS}")
        if self.kl_coef < 0.0:
            raise RLConfigError(f"PolicyLossConfig.kl_coef: must be >= 0, got {self.kl_coef}")


@dataclass(frozen=True)
class PolicyLossOutput:
    loss: torch.Tensor  # 0-dim, differentiable
    stats: dict[str, torch.Tensor]  # detached 0-dim tensors for logging


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Reduce (B, L) token values over valid tokens. Rows without valid tokens (e.g. rejected) are left out
    of the sequence means rather than diluting them; an all-empty batch gives 0 (still differentiable)."""
    m = mask.to(values.dtype)
    masked = torch.where(mask.bool(), values, torch.zeros_like(values))
    if mode == "token-mean":
        return masked.sum() / m.sum().clamp(min=1)
    row_tokens = m.sum(dim=1)
    if mode == "seq-mean-token-sum":
        row_values = masked.sum(dim=1)
    elif mode == "seq-mean-token-mean":
        row_values = masked.sum(dim=1) / row_tokens.clamp(min=1)
    else:
        raise ValueError(f"aggregation: {mode!r} is not one of {AGGREGATIONS}")
    return row_values.sum() / (row_tokens > 0).sum().clamp(min=1)


def chunk_share(mask: torch.Tensor, rows: slice, mode: str) -> float:
    """The share of `aggregate`'s normaliser over `mask` held by `rows`: the losses of a batch's chunks, each weighted
    by its share, accumulate the gradient of the whole batch's."""
    if mode == "token-mean":
        return float(mask[rows].sum()) / max(float(mask.sum()), 1.0)
    return float(mask[rows].any(dim=1).sum()) / max(float(mask.any(dim=1).sum()), 1.0)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim, in nats, computed in fp32 or wider."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def policy_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    is_weights: torch.Tensor | None = None,
    logp_ref: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    logits: torch.Tensor | None = None,
    config: PolicyLossConfig = PolicyLossConfig(),
) -> PolicyLossOutput:
    """Clipped policy-gradient loss over (B, L) token tensors.

    Args:
        logp_new: (B, L) log-probs of the sampled tokens under the policy being trained (requires grad).
        logp_old: (B, L) log-probs under the policy that the advantages were computed for.
        advantages: (B,) per row (broadcast to its tokens) or (B, L) per token.
        loss_mask: (B, L) bool or 0/1, True on tokens that train.
        is_weights: (B, L) importance weights (e.g. TIS), treated as constants.
        logp_ref: (B, L) reference-policy log-probs; required when config.kl_coef > 0.
        entropy / logits: (B, L) token entropies or (B, L, V) logits, for the entropy statistic only.
    """
    require_2d("logp_new", logp_new)
    require_same_shape("logp_old", logp_old, "logp_new", logp_new)
    require_same_shape("loss_mask", loss_mask, "logp_new", logp_new)
    if advantages.dim() == 1 and advantages.shape[0] == logp_new.shape[0]:
        advantages = advantages[:, None].expand_as(logp_new)
    require_same_shape("advantages", advantages, "logp_new", logp_new)
    if is_weights is not None:
        require_same_shape("is_weights", is_weights, "logp_new", logp_new)
    if config.kl_coef > 0.0 and logp_ref is None:
        raise ValueError("logp_ref: required when PolicyLossConfig.kl_coef > 0; pass the reference log-probs")
    if logp_ref is not None:
        require_same_shape("logp_ref", logp_ref, "logp_new", logp_new)

    mask = loss_mask.bool()
    # Zero padded positions before any arithmetic: a -inf/NaN log-prob there would otherwise turn the
    # (masked-out) backward into 0·NaN = NaN.
    zero = logp_new.new_zeros(())
    adv = torch.where(mask, advantages.detach().to(logp_new.dtype), zero)
    log_ratio = torch.where(mask, logp_new - logp_old.detach(), zero).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    token_loss = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    dual_active = torch.zeros_like(mask)
    if config.dual_clip is not None:
        cap = -adv * config.dual_clip
        dual_active = (adv < 0) & (token_loss > cap)
        token_loss = torch.where(dual_active, cap, token_loss)
    if is_weights is not None:
        token_loss = token_loss * torch.where(mask, is_weights.detach().to(token_loss.dtype), zero)

    pg_loss = aggregate(token_loss, mask, config.aggregation)
    loss = pg_loss

    with torch.no_grad():
        n_tokens = mask.sum().clamp(min=1)
        stats = {
            "loss/pg": pg_loss.detach(),
            "loss/clip_fraction": (clip_active & mask).sum() / n_tokens,
            "loss/dual_clip_fraction": (dual_active & mask).sum() / n_tokens,
            # k3 estimate of KL(old || new) on tokens sampled from old: E_old[r - 1 - log r] >= 0.
            "loss/approx_kl": ((ratio - 1 - log_ratio) * mask).sum() / n_tokens,
            "loss/ratio_mean": (ratio * mask).sum() / n_tokens,
        }
    if logp_ref is not None:
        # k3 estimator of KL(new || ref): exp(ref - new) - (ref - new) - 1, unbiased and >= 0 per token.
        ref_log_ratio = torch.where(mask, logp_ref.detach() - logp_new, zero)
        ref_log_ratio = ref_log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        kl = ref_log_ratio.exp() - ref_log_ratio - 1
        kl_loss = aggregate(kl, mask, config.aggregation)
        loss = loss + config.kl_coef * kl_loss
        stats["loss/kl_ref"] = kl_loss.detach()
    if entropy is None and logits is not None:
        with torch.no_grad():
            entropy = token_entropy(logits)
    if entropy is not None:
        require_same_shape("entropy", entropy, "logp_new", logp_new)
        stats["loss/entropy"] = torch.where(mask, entropy.detach(), zero).sum() / n_tokens
    stats["loss/total"] = loss.detach()
    return PolicyLossOutput(loss=loss, stats=stats)
