"""Every RL config class refuses bad values itself with RLConfigError (a UserError: one line, exit 2), so the RL
command needs no translation of ValueErrors at its boundary."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxycomp.cli import main as proxycomp
from proxycomp.errors import UserError
from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config
from proxycomp.gym_bridge.rl.config import FabricSettings, GymSettings, RLConfig
from proxycomp.gym_bridge.rl.evaluation import EvaluationConfig
from proxycomp.gym_bridge.rl.mismatch import MismatchConfig
from proxycomp.gym_bridge.rl.policy_loss import PolicyLossConfig
from proxycomp.gym_bridge.rl.prs import PRSConfig
from proxycomp.gym_bridge.rl.rollout import RolloutConfig
from proxycomp.gym_bridge.rl.algorithm import AlgorithmConfig
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


def test_a_context_past_the_pretrained_one_is_refused_unless_told():
    assert RLConfig().context(4096) == 4096  # null: the checkpoint's own
    fits = RolloutConfig(max_bytes=1024, prompt_max_bytes=1024)
    assert RLConfig(max_context=2048, rollout=fits).context(4096) == 2048
    with pytest.raises(RLConfigError, match="^max_context 6144 is past the 4096 symbols the --ckpt was pretrained at"):
        RLConfig(max_context=6144).context(4096)
    assert RLConfig(max_context=6144, extrapolate_context=True).context(4096) == 6144


def test_prompts_and_replies_past_the_context_are_refused_before_anything_runs():
    with pytest.raises(RLConfigError, match=r"2049 \+ 2048 is past the context of 4096 symbols"):
        RLConfig(rollout=RolloutConfig(max_bytes=2048, prompt_max_bytes=2049)).context(4096)
    assert RLConfig(rollout=RolloutConfig(max_bytes=2048, prompt_max_bytes=None)).context(4096) == 4096  # not cut
    with pytest.raises(RLConfigError, match="prompt_max_bytes: must be > 2"):
        RolloutConfig(prompt_max_bytes=2)


def test_rl_refuses_the_context_before_the_run_folder_exists(tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "run"  # the tiny checkpoint is pretrained at 4096 symbols
    assert proxycomp(["rl", "--ckpt", str(tiny_ckpt), "--out", str(out), "--tasks", "[relu]",
                      "--max_context", "6144"]) == 2
    assert "past the 4096 symbols the --ckpt was pretrained at" in capsys.readouterr().err and not out.exists()


def test_the_family_policy_is_pretrained_at_the_rl_context():
    recipes = Path(__file__).resolve().parents[2] / "recipes"
    policy = yaml.safe_load((recipes / "pretrain" / "h200_policy.yaml").read_text())
    rl = yaml.safe_load((recipes / "rl" / "h200_family.yaml").read_text())
    assert rl["max_context"] == policy["data"]["seq_len"] and not rl.get("extrapolate_context")
