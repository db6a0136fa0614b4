"""Episode logic against the real CPU gym, with a policy that replays scripted replies turn by turn."""
from collections.abc import Sequence

import pytest
from torch import nn

from proxycomp.gym_bridge.config import RewardWeights
from proxycomp.gym_bridge.extract import extract_code
from proxycomp.gym_bridge.policy import Policy, Sample, ScoredReplies
from proxycomp.gym_bridge.result import EvalResult
from proxycomp.gym_bridge.reward import compute_reward
from proxycomp.gym_bridge.rl import reward_to_go, stack_turns
from proxycomp.gym_bridge.rl.rollout import RolloutConfig, run_episodes
from proxycomp.gym_bridge.rl.warmstart import reply_text
from proxycomp.gym_bridge.tasks import load_task

RELU = load_task("relu")
SOLUTION = RELU.solution_path.read_text()
BROKEN = SOLUTION.replace("tl.where(x > 0", "tl.where(x < 0")


class ScriptedPolicy:
    """Replies with script[turn] for every prompt of a turn (a turn = one generate call)."""

    module = nn.Linear(1, 1)

    def __init__(self, script: Sequence[str]) -> None:
        self.script, self.calls = list(script), []

    def generate(self, prompts, n, max_bytes, temperature, top_p, generator=None):
        reply = self.script[len(self.calls)]
        self.calls.append(list(prompts))
        tokens = self.encode_reply(reply)
        return [[Sample(reply, tokens, [-0.1] * len(tokens), truncated=False) for _ in range(n)] for _ in prompts]

    def score(self, prompts, replies, temperature) -> ScoredReplies:
        raise NotImplementedError("rollout never re-scores")

    def encode_reply(self, text: str) -> list[int]:
        return list(text.encode()) + [-1]


def test_scripted_policy_fits_the_protocol():
    assert isinstance(ScriptedPolicy([]), Policy)


def test_feedback_is_carried_and_every_turn_is_played(cpu_gym):
    policy = ScriptedPolicy([reply_text(BROKEN), reply_text(SOLUTION), reply_text(SOLUTION)])
    config = RolloutConfig(turns=3, samples_per_task=2, max_bytes=2048)
    trajectories = run_episodes(policy, cpu_gym, [RELU], config)
    assert len(trajectories) == 2 and len(policy.calls) == 3  # a correct turn 1 does not end the episode
    for traj in trajectories:
        first, second, third = traj.turns
        assert (first.correct, first.reward, first.status) == (False, 0.0, "incorrect")
        assert "incorrect" in first.feedback
        assert BROKEN.strip() in second.prompt and first.feedback.strip() in second.prompt
        assert (second.correct, second.reward, second.status) == (True, 1.0, "ok")
        assert second.tokens == policy.encode_reply(reply_text(SOLUTION))
        assert second.logprobs.shape == (len(second.tokens),)
        assert (third.correct, third.reward, third.feedback) == (True, 1.0, second.feedback)
    turns = stack_turns(trajectories)
    returns = reward_to_go(turns.rewards, turns.turn_mask, gamma=1.0)
    assert returns.tolist() == [[2.0, 2.0, 1.0], [2.0, 2.0, 1.0]]
    assert reward_to_go(turns.rewards, turns.turn_mask, gamma=0.0).tolist() == [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]


def test_repeated_code_takes_its_previous_verdict_without_a_gym_call(cpu_gym):
    sizes = []

    class CountingGym:
        def submit(self, batch):
            sizes.append(len(batch))
            return cpu_gym.submit(batch)

    policy = ScriptedPolicy([reply_text(BROKEN)] * 3)
    timings = {"generate_s": 1.0}  # added to, not replaced
    trajectories = run_episodes(policy, CountingGym(), [RELU], RolloutConfig(turns=3, samples_per_task=1),
                                timings=timings)
    assert len(trajectories[0].turns) == 3 and sizes == [1]
    assert [t.status for t in trajectories[0].turns] == ["incorrect"] * 3
    # One turn scored by the real CPU gym: the wait is accounted (a warm worker scores relu in ~20 ms).
    assert timings["generate_s"] > 1.0 and timings["gym_wait_s"] > 0.0


FAST, SLOW = SOLUTION, SOLUTION.replace("BLOCK = 4096", "BLOCK = 128")


class TimedGym:
    """Stands in for the GPU gym: the real reward of a fast (2x) or slow (1.05x) correct kernel, or of a broken one."""

    speedups = {extract_code(reply_text(FAST)): 2.0, extract_code(reply_text(SLOW)): 1.05}

    def submit(self, batch):
        results = []
        for candidate in batch:
            speedup = self.speedups.get(extract_code(candidate.code))
            correct = speedup is not None
            status = "ok" if correct else "incorrect"
            reward, reason = compute_reward(status=status, correct=correct, hacks=[], speedup=speedup,
                                            coverage=1.0 if correct else None, weights=RewardWeights())
            results.append(EvalResult(candidate.id, "relu", status, reward, reason, correct=correct, speedup=speedup,
                                      kernel_ms=None if speedup is None else 1.0, ref_ms=speedup))
        return results


def test_a_better_first_turn_never_gets_a_lower_return():
    """With γ = 1 and episodes played to the turn limit, a fast first turn that the policy keeps earns more
    return than a slow or broken one that it improves later (stopping on success would pay the slow one more)."""
    first_turns = [FAST, SLOW, BROKEN]  # best first
    returns = []
    for first in first_turns:
        policy = ScriptedPolicy([reply_text(first), reply_text(FAST), reply_text(FAST)])
        (traj,) = run_episodes(policy, TimedGym(), [RELU], RolloutConfig(turns=3, samples_per_task=1))
        turns = stack_turns([traj])
        assert turns.turn_mask.all()
        returns.append(reward_to_go(turns.rewards, turns.turn_mask, gamma=1.0)[0, 0].item())
    assert returns == sorted(returns, reverse=True) and len(set(returns)) == len(returns), returns


def test_all_candidates_of_a_turn_go_in_one_submit(cpu_gym):
    sizes = []

    class CountingGym:
        def submit(self, batch):
            sizes.append(len(batch))
            return cpu_gym.submit(batch)

    run_episodes(ScriptedPolicy(["no code here"] * 2), CountingGym(), [RELU, load_task("silu")],
                 RolloutConfig(turns=2, samples_per_task=3))
    assert sizes == [6, 6]


def test_rollout_config_rejects_bad_values():
    with pytest.raises(ValueError, match="rollout.turns"):
        RolloutConfig(turns=0)
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=0.0)
