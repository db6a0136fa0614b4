"""What the policy learns from one rollout, and how: the `AlgorithmConfig` of the update, and `make_batch`, which
turns the rollout's trajectories into an `RLBatch` (reward-to-go, void-turn masking, advantages over (task, turn)
groups, profiling-based rejection), one row per kept turn. Pure: no model, no gym, no I/O."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from proxycomp.defaults import GRAD_CLIP

from ._checks import RLConfigError
from .advantages import get_estimator, group_sizes
from .episode import Trajectory, TurnBatch, stack_turns, void_turn_mask
from .mismatch import MismatchConfig
from .policy_loss import PolicyLossConfig
from .prs import PRSConfig, band, profiling_rejection
from .returns import reward_to_go


@dataclass
class AlgorithmConfig:
    """The policy update.

    Args:
        estimator: the advantage estimator: trloo, grpo or rloo (any registered one)
        estimator_options: keyword arguments of the estimator, e.g. grpo's {"std_normalize": true}
        gamma: reward-to-go discount over turns
        mask_void_turns: leave void turns out of the advantage groups and the update, as KernelGYM's
            mask_void_turn: a turn rewarded <= 0 after its episode scored > 0, and every turn of an episode the gym
            failed (infra_error); false: every played turn counts
        lr: AdamW learning rate
        weight_decay: AdamW weight decay
        grad_clip: gradient norm clip
        updates_per_step: optimizer steps on each rollout batch
        micro_batch: rows (turns) per forward and backward; gradients accumulate over them
        loss: the clipped policy-gradient loss
        prs: profiling-based rejection sampling; null: off
        mismatch: trainer/rollout mismatch correction
    """

    estimator: str = "trloo"
    estimator_options: dict[str, Any] = field(default_factory=dict)
    gamma: float = 1.0
    mask_void_turns: bool = True
    lr: float = 1e-6
    weight_decay: float = 0.0
    grad_clip: float = GRAD_CLIP
    updates_per_step: int = 1
    micro_batch: int = 8
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    prs: PRSConfig | None = field(default_factory=PRSConfig)
    mismatch: MismatchConfig = field(default_factory=MismatchConfig)

    def __post_init__(self) -> None:
        try:  # unknown names fail here, with the known ones listed
            estimator = get_estimator(self.estimator)
        except KeyError as err:
            raise RLConfigError(f"algorithm.estimator: {err.args[0]}") from None
        try:  # an option the estimator does not take fails here too, not at the first step
            estimator(torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, dtype=torch.long),
                      **self.estimator_options)
        except TypeError as err:
            raise RLConfigError(f"algorithm.estimator_options: {self.estimator} refuses {self.estimator_options} "
                                f"({err})") from None
        if self.lr <= 0 or self.grad_clip <= 0 or self.updates_per_step < 1 or self.micro_batch < 1:
            raise RLConfigError("algorithm: need lr > 0, grad_clip > 0, updates_per_step >= 1 and micro_batch >= 1")


@dataclass
class RLBatch:
    """The kept turns of one rollout as rows."""

    prompts: list[str]
    tokens: list[list[int]]
    logp_rollout: torch.Tensor  # (B, L), 0 past each reply
    advantages: torch.Tensor  # (B,)
    traj_ids: torch.Tensor  # (B,)
    stats: dict[str, float]
    prs_verdicts: dict[tuple[int, int], dict] = field(default_factory=dict)  # (trajectory, turn): PRS's record
    void_turns: frozenset[tuple[int, int]] = frozenset()  # (trajectory, turn) left out as void

    def __len__(self) -> int:
        return len(self.prompts)


def _pad(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True) if rows else torch.zeros(0, 0)


def _group_stats(turns: TurnBatch, counted: torch.Tensor) -> dict[str, float]:
    """The (task, turn) group sizes the baselines were taken over, and what void masking left out."""
    sizes = group_sizes(counted, turns.group_ids).double()
    nan = float("nan")
    return {
        "group_size/min": float(sizes.min()) if sizes.numel() else nan,
        "group_size/mean": float(sizes.mean()) if sizes.numel() else nan,
        "group_size/max": float(sizes.max()) if sizes.numel() else nan,
        "void/masked_share": float((turns.turn_mask & ~counted).sum() / turns.turn_mask.sum()),
        "void/errored_share": float(turns.errored.double().mean()),
    }


def make_batch(
    trajectories: Sequence[Trajectory], config: AlgorithmConfig, generator: torch.Generator | None = None
) -> RLBatch:
    """Returns, void masking, advantages and PRS over the turns; one row per kept turn."""
    turns = stack_turns(trajectories)
    # Returns run over every played turn, so a void turn's successors still credit the turns before it.
    returns = reward_to_go(turns.rewards, turns.turn_mask, config.gamma)
    counted = turns.turn_mask
    if config.mask_void_turns:
        counted = void_turn_mask(turns.rewards, turns.turn_mask, turns.errored)
    advantages = get_estimator(config.estimator)(returns, counted, turns.group_ids, **config.estimator_options)
    counted_advantages = advantages[counted]
    stats = {"advantage/abs_mean": float(counted_advantages.abs().mean()),
             # The turns that move the policy: a group whose returns are all equal gives each member 0.
             "advantage/nonzero_share": float((counted_advantages != 0).double().mean()),
             **_group_stats(turns, counted)}
    keep, verdicts = counted, {}
    if config.prs is not None:
        prs = profiling_rejection(turns.correct, turns.hacked, turns.coverage, turn_mask=counted,
                                  config=config.prs, generator=generator)
        keep = prs.keep
        stats.update({k: float(v) for k, v in prs.stats.items()})
        verdicts = {(i, t): {"kept": bool(keep[i, t]), "keep_prob": float(prs.keep_prob[i, t]),
                             "band": band(turn.correct, turn.hacked, turn.coverage, config.prs),
                             "coverage": turn.coverage, "threshold": config.prs.threshold}
                    for i, traj in enumerate(trajectories) for t, turn in enumerate(traj.turns) if counted[i, t]}
    rows = [(i, t) for i, traj in enumerate(trajectories) for t in range(len(traj.turns)) if keep[i, t]]
    for i, t in rows:
        turn = trajectories[i].turns[t]
        if turn.tokens is None or turn.logprobs is None:
            raise ValueError(f"trajectory {i} turn {t}: no tokens/log-probs recorded; roll out with run_episodes")
    return RLBatch(
        prompts=[trajectories[i].turns[t].prompt for i, t in rows],
        tokens=[list(trajectories[i].turns[t].tokens) for i, t in rows],
        logp_rollout=_pad([trajectories[i].turns[t].logprobs for i, t in rows]),
        advantages=torch.tensor([float(advantages[i, t]) for i, t in rows], dtype=torch.float32),
        traj_ids=torch.tensor([i for i, _ in rows], dtype=torch.long),
        stats=stats,
        prs_verdicts=verdicts,
        void_turns=frozenset(map(tuple, (turns.turn_mask & ~counted).nonzero().tolist())),
    )
