"""Void-turn masking (KernelGYM's mask_void_turn): which turns it leaves out, the group sizes it reports, and why it
makes TRLOO and GRPO differ by more than a constant scale (without it every (task, turn) group has the same N, GRPO
is (N-1)/N of TRLOO on every row, and AdamW's scale-free step makes the two arms one)."""
import json

import pytest
import torch
from lightning.fabric import Fabric

from proxycomp.gym_bridge.policy import ByteLMPolicy
from proxycomp.gym_bridge.rl import MismatchConfig, Trajectory, Turn
from proxycomp.gym_bridge.rl.episode import stack_turns, void_turn_mask
from proxycomp.gym_bridge.rl.algorithm import AlgorithmConfig, make_batch
from proxycomp.gym_bridge.rl.trainer import MetricsLog, PolicyUpdater

PROMPT = "Write ModelNew.\n"
LR = 1e-3
# Eight episodes of one task, two turns. Episodes 1 and 2 lose their turn-0 kernel at turn 1: void, so turn 1's
# group has 6 members and turn 0's has 8.
REWARDS = [(1.0, 1.0), (1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0), (0.0, 0.0), (0.0, 1.0), (0.0, 0.0)]


def turn(reward: float, status: str | None = None, tokens: list[int] | None = None,
         logprobs: torch.Tensor | None = None) -> Turn:
    status = status or ("ok" if reward > 0 else "incorrect")
    return Turn(PROMPT, "reply", reward=reward, status=status, correct=reward > 0,
                tokens=tokens if tokens is not None else [1, 2], logprobs=logprobs if logprobs is not None
                else torch.zeros(2))


def episodes(rewards=REWARDS, task: str = "relu") -> list[Trajectory]:
    return [Trajectory(task, "src", [turn(r) for r in rs]) for rs in rewards]


def test_void_turns_are_zeros_after_a_success_and_errored_episodes():
    trajectories = [
        Trajectory("a", "src", [turn(0.0), turn(1.0), turn(0.0)]),  # first zero kept, the zero after success void
        Trajectory("a", "src", [turn(2.0), turn(0.0), turn(3.0)]),  # void in the middle leaves a gap
        Trajectory("a", "src", [turn(0.0, "error"), turn(0.0, "timeout"), turn(0.0, "crashed")]),  # the candidate's
        Trajectory("a", "src", [turn(1.0), turn(1.0)]),  # shorter: padding stays out
        Trajectory("a", "src", [turn(1.0), turn(0.0, "infra_error"), turn(1.0)]),  # the gym failed: all out
    ]
    turns = stack_turns(trajectories)
    assert turns.errored.tolist() == [False, False, False, False, True]
    counted = void_turn_mask(turns.rewards, turns.turn_mask, turns.errored)
    assert counted.tolist() == [[True, True, False], [True, False, True], [True, True, True], [True, True, False],
                                [False, False, False]]
    assert void_turn_mask(turns.rewards, turns.turn_mask, torch.zeros(5, dtype=torch.bool))[4].tolist() == [
        True, False, True]
    with pytest.raises(ValueError, match=r"errored: expected a bool tensor of shape \(5,\)"):
        void_turn_mask(turns.rewards, turns.turn_mask, torch.zeros(4, dtype=torch.bool))


def test_make_batch_drops_void_turns_and_reports_group_sizes():
    trajectories = episodes() + [Trajectory("relu", "src", [turn(1.0, "infra_error"), turn(1.0)])]
    batch = make_batch(trajectories, AlgorithmConfig(prs=None))
    assert len(batch) == 14 and batch.void_turns == {(1, 1), (2, 1), (8, 0), (8, 1)}
    assert batch.traj_ids.tolist() == [0, 0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert {k: batch.stats[k] for k in ("group_size/min", "group_size/mean", "group_size/max")} == {
        "group_size/min": 6.0, "group_size/mean": 7.0, "group_size/max": 8.0}
    assert batch.stats["void/masked_share"] == pytest.approx(4 / 18)
    assert batch.stats["void/errored_share"] == pytest.approx(1 / 9)
    assert batch.stats["advantage/nonzero_share"] == 1.0  # both (task, turn) groups hold different returns
    unsolved = make_batch(episodes() + episodes([(0.0, 0.0)] * 8, task="silu"), AlgorithmConfig(prs=None))
    assert unsolved.stats["advantage/nonzero_share"] == pytest.approx(14 / 30)  # silu's 16 turns all give 0
    off = make_batch(trajectories, AlgorithmConfig(prs=None, mask_void_turns=False))
    assert len(off) == 18 and not off.void_turns and off.stats["void/masked_share"] == 0.0
    assert off.stats["group_size/min"] == off.stats["group_size/max"] == 9.0


def test_rollouts_log_says_which_turns_were_void(tmp_path):
    trajectories = episodes()
    batch = make_batch(trajectories, AlgorithmConfig())
    MetricsLog(tmp_path).write_turns(1, trajectories, {}, batch.prs_verdicts, batch.void_turns)
    turns = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [(t["episode"], t["turn"]) for t in turns if t["void"]] == [(1, 1), (2, 1)]
    assert all((t["prs"] is None) == t["void"] for t in turns)  # PRS judged only the turns that count


def ratios(mask_void_turns: bool) -> torch.Tensor:
    """GRPO's advantage over TRLOO's on every row where TRLOO's is not 0, from make_batch's rows."""
    trloo, grpo = (make_batch(episodes(), AlgorithmConfig(estimator=e, prs=None, mask_void_turns=mask_void_turns))
                   for e in ("trloo", "grpo"))
    assert trloo.traj_ids.tolist() == grpo.traj_ids.tolist()
    nonzero = trloo.advantages != 0
    return (grpo.advantages[nonzero] / trloo.advantages[nonzero]).double()


def test_without_masking_grpo_is_a_constant_scale_of_trloo():
    torch.testing.assert_close(ratios(False), torch.full_like(ratios(False), 7 / 8))


def test_with_masking_grpo_and_trloo_are_not_proportional():
    # Turn 0's group keeps 8 members (ratio 7/8), turn 1's keeps 6 (ratio 5/6): no one scale maps one on the other.
    assert sorted({round(float(r), 6) for r in ratios(True)}) == [round(5 / 6, 6), round(7 / 8, 6)]


def update(make_tiny_transformer, estimator: str, mask_void_turns: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient, parameter step) of one PolicyUpdater update of the same tiny policy on the same episodes."""
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true")
    module = fabric.setup_module(make_tiny_transformer(0))
    policy = ByteLMPolicy(module)
    trajectories = []
    for k, rewards in enumerate(REWARDS):
        turns = []
        for t, reward in enumerate(rewards):
            tokens = policy.encode_reply(f"y = x * {k + t}\n")
            with torch.no_grad():
                logprobs = policy.score([PROMPT], [tokens], 1.0).logprobs[0]
            turns.append(turn(reward, tokens=tokens, logprobs=logprobs))
        trajectories.append(Trajectory("relu", "src", turns))
    config = AlgorithmConfig(estimator=estimator, mask_void_turns=mask_void_turns, prs=None, lr=LR, grad_clip=1e9,
                             mismatch=MismatchConfig(rejection="none", veto_threshold=None))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=0.0))
    before = torch.cat([p.detach().flatten().clone() for p in module.parameters()])
    PolicyUpdater(fabric, policy, optimizer, config, temperature=1.0).update(make_batch(trajectories, config))
    grad = torch.cat([p.grad.flatten() for p in module.parameters()])
    after = torch.cat([p.detach().flatten() for p in module.parameters()])
    return grad, after - before


def residual(g: torch.Tensor, ref: torch.Tensor) -> float:
    """What is left of ``g`` after the best single scale of ``ref`` is taken out, relative to ``g``."""
    return float((g - (g @ ref) / (ref @ ref) * ref).norm() / g.norm())


def test_one_update_is_the_same_for_both_estimators_without_masking_and_differs_with_it(make_tiny_transformer):
    (g_trloo, step_trloo), (g_grpo, step_grpo) = (update(make_tiny_transformer, e, False) for e in ("trloo", "grpo"))
    # The A/A test: GRPO's gradient is 7/8 of TRLOO's, and AdamW's first step (lr·g/(|g| + eps)) does not see the
    # scale: no weight steps the other way (a sign flip is a 2·lr gap; eps alone moves tiny gradients' steps a bit).
    assert float((g_grpo @ g_trloo) / (g_trloo @ g_trloo)) == pytest.approx(7 / 8, rel=1e-5)
    assert residual(g_grpo, g_trloo) < 1e-4
    assert ((step_grpo - step_trloo).abs() > LR).sum() == 0

    (g_trloo, step_trloo), (g_grpo, step_grpo) = (update(make_tiny_transformer, e, True) for e in ("trloo", "grpo"))
    assert residual(g_grpo, g_trloo) > 1e-2  # the directions differ
    assert ((step_grpo - step_trloo).abs() > LR).sum() > 0
