"""Every RL config class refuses bad values itself with RLConfigError (a UserError: one line, exit 2), so the RL
command needs no translation of ValueErrors at its boundary."""
from __future__ import annotations

import pytest

from proxycomp.errors import UserError
from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config
from proxycomp.gym_bridge.rl.config import FabricSettings, GymSettings, RLConfig
from proxycomp.gym_bridge.rl.evaluation import EvaluationConfig
from proxycomp.gym_bridge.rl.mismatch import MismatchConfig
from proxycomp.gym_bridge.rl.policy_loss import PolicyLossConfig
from proxycomp.gym_bridge.rl.prs import PRSConfig
from proxycomp.gym_bridge.rl.rollout import RolloutConfig
from proxycomp.gym_bridge.rl.trainer import AlgorithmConfig
from proxycomp.gym_bridge.rl.warmstart import WarmStartConfig

BAD = [
    (GymSettings, dict(correct_trials="three"), "gym.correct_trials"),
    (FabricSettings, dict(matmul_precision="low"), "fabric.matmul_precision"),
    (RLConfig, dict(tasks_per_step=0), "tasks_per_step"),
    (EvaluationConfig, dict(sizes=[]), "evaluation.sizes"),
    (MismatchConfig, dict(tis="all"), "MismatchConfig.tis"),
    (PolicyLossConfig, dict(clip_low=1.5), "PolicyLossConfig.clip_low"),
    (PRSConfig, dict(scale=0.0), "PRSConfig.scale"),
    (RolloutConfig, dict(turns=0), "rollout.turns"),
    (AlgorithmConfig, dict(estimator="ppo"), "algorithm.estimator"),
    (WarmStartConfig, dict(fix_share=2.0), "warmstart.fix_share"),
]


@pytest.mark.parametrize("cls, values, named", BAD, ids=[c.__name__ for c, *_ in BAD])
def test_each_config_class_raises_rl_config_error(cls, values, named):
    with pytest.raises(RLConfigError, match=named) as info:
        cls(**values)
    assert isinstance(info.value, UserError) and "\n" not in str(info.value)


def test_parse_config_passes_a_nested_refusal_through_unchanged():
    with pytest.raises(RLConfigError, match=r"^PolicyLossConfig.clip_low: must be in \(0, 1\), got 2.0$"):
        parse_config(["--ckpt", "x", "--algorithm.loss.clip_low", "2"])
