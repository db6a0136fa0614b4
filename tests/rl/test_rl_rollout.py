"""Episode logic against the real CPU gym, with a policy that replays scripted replies turn by turn."""
from collections.abc import Sequence

import pytest
import torch
from torch import nn

from proxycomp.gym_bridge.policy import Policy, Sample, ScoredReplies
from proxycomp.gym_bridge.rl import Trajectory, Turn, reward_to_go, stack_turns
from proxycomp.gym_bridge.rl.rollout import RolloutConfig, is_finished, run_episodes
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


def test_feedback_is_carried_and_a_correct_turn_ends_the_episode(cpu_gym):
    policy = ScriptedPolicy([reply_text(BROKEN), reply_text(SOLUTION), reply_text(SOLUTION)])
    config = RolloutConfig(turns=3, samples_per_task=2, max_bytes=2048)
    trajectories = run_episodes(policy, cpu_gym, [RELU], config)
    assert len(trajectories) == 2 and len(policy.calls) == 2  # turn 1 was correct: no third turn
    for traj in trajectories:
        first, second = traj.turns
        assert (first.correct, first.reward) == (False, 0.0) and "incorrect" in first.feedback
        assert BROKEN.strip() in second.prompt and first.feedback.strip() in second.prompt
        assert (second.correct, second.reward) == (True, 1.0)
        assert second.tokens == policy.encode_reply(reply_text(SOLUTION))
        assert second.logprobs.shape == (len(second.tokens),)
    turns = stack_turns(trajectories)
    returns = reward_to_go(turns.rewards, turns.turn_mask, gamma=1.0)
    assert returns.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert reward_to_go(turns.rewards, turns.turn_mask, gamma=0.0).tolist() == [[0.0, 1.0], [0.0, 1.0]]


def test_unchanged_code_stops_the_episode(cpu_gym):
    policy = ScriptedPolicy([reply_text(BROKEN)] * 3)
    timings = {"generate_s": 1.0}  # added to, not replaced
    trajectories = run_episodes(policy, cpu_gym, [RELU], RolloutConfig(turns=3, samples_per_task=1), timings=timings)
    assert len(trajectories[0].turns) == 2
    # Two turns scored by the real CPU gym: the wait is accounted (a warm worker scores relu in ~20 ms).
    assert timings["generate_s"] > 1.0 and timings["gym_wait_s"] > 0.0


def test_all_candidates_of_a_turn_go_in_one_submit(cpu_gym):
    sizes = []

    class CountingGym:
        def submit(self, batch):
            sizes.append(len(batch))
            return cpu_gym.submit(batch)

    run_episodes(ScriptedPolicy(["no code here"] * 2), CountingGym(), [RELU, load_task("silu")],
                 RolloutConfig(turns=2, samples_per_task=3))
    assert sizes == [6, 6]


@pytest.mark.parametrize("correct, speedup, hacks, done", [
    (True, None, (), True),  # untimed (CPU): nothing more to measure
    (True, 1.3, (), True),
    (True, 1.0, (), False),  # correct but not fast enough: try to speed it up
    (True, 2.0, ("decoy",), False),
    (False, None, (), False),
])
def test_is_finished(correct, speedup, hacks, done):
    traj = Trajectory("relu", "", [Turn("p", "r", code="a", correct=correct, speedup=speedup, hacks=hacks)])
    assert is_finished(traj, stop_speedup=1.2) is done


def test_rollout_config_rejects_bad_values():
    with pytest.raises(ValueError, match="rollout.turns"):
        RolloutConfig(turns=0)
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=0.0)
