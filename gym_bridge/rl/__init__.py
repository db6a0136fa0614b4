"""Kernel RL in the gym, `proxycomp rl`: its config (config.py), the warm start (warmstart.py), multi-turn rollouts that
the gym's judge processes score (rollout.py), what a rollout teaches (algorithm.py), the trainer (trainer.py),
held-out evaluation (evaluation.py) and the estimator comparison (compare.py). Exported here are its tensor
functions, which run nothing else: reward-to-go, advantage estimators (TRLOO, GRPO, RLOO), profiling-based rejection
sampling, training/rollout mismatch correction, the clipped policy loss, and episode prompts."""
from .advantages import estimator_names, get_estimator, register_estimator
from .episode import (
    DEFAULT_INSTRUCTIONS,
    Trajectory,
    Turn,
    TurnBatch,
    feedback_text,
    first_prompt,
    next_prompt,
    stack_turns,
)
from .policy_loss import AGGREGATIONS, PolicyLossConfig, PolicyLossOutput, policy_loss
from .mismatch import MismatchConfig, MismatchResult, correct_mismatch
from .prs import PRSConfig, PRSResult, profiling_rejection
from .returns import reward_to_go

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_INSTRUCTIONS",
    "MismatchConfig",
    "MismatchResult",
    "PRSConfig",
    "PRSResult",
    "PolicyLossConfig",
    "PolicyLossOutput",
    "Trajectory",
    "Turn",
    "TurnBatch",
    "correct_mismatch",
    "estimator_names",
    "feedback_text",
    "first_prompt",
    "get_estimator",
    "next_prompt",
    "policy_loss",
    "profiling_rejection",
    "register_estimator",
    "reward_to_go",
    "stack_turns",
]
