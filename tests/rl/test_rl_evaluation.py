"""The held-out evaluation in chunks: one killed midway, or stopped by its deadline, goes on from its finished chunks
and gives the rows of an uninterrupted one; a chunk is reused only for the same phase, settings and weights (bf16
rounding aside)."""
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from proxycomp.gym_bridge.config import RewardWeights
from proxycomp.gym_bridge.extract import extract_code
from proxycomp.gym_bridge.result import EvalResult
from proxycomp.gym_bridge.reward import compute_reward
from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config
from proxycomp.gym_bridge.rl.evaluation import (CHUNK_MARGIN, PROGRESS_FILE, REPLIES_FILE, EvaluationConfig, HeldOut,
                                               OutOfTime)
from proxycomp.gym_bridge.rl.rollout import RolloutConfig
from proxycomp.gym_bridge.rl.warmstart import reply_text
from proxycomp.gym_bridge.tasks import load_task

TASKS = [load_task(name) for name in ("relu", "silu", "gelu_tanh")]
ALL = {task.name for task in TASKS}
FAST = TASKS[0].solution_path.read_text()
CODES = (FAST, FAST.replace("BLOCK = 4096", "BLOCK = 128"), FAST.replace("tl.where(x > 0", "tl.where(x < 0"))
CONFIG = EvaluationConfig(sizes=["cpu"], samples_per_task=3, turns=2, chunk_tasks=1, seed=7)
ROLLOUT = RolloutConfig(max_bytes=8, prompt_max_bytes=1600)


class PickingPolicy:
    """The real tiny policy samples each reply; its symbols pick which of three codes is sent, so what the gym
    scores follows the seeded sampler."""

    def __init__(self, inner) -> None:
        self.inner, self.module = inner, inner.module

    def generate(self, prompts, n, max_bytes, temperature, top_p, generator=None):
        out = self.inner.generate(prompts, n, max_bytes, temperature, top_p, generator=generator)
        return [[replace(s, text=reply_text(CODES[sum(s.tokens) % 3])) for s in group] for group in out]


class CodeGym:
    """Stands in for the gym: a fast, a slow and a broken kernel get their real rewards without running. It notes
    the tasks it is asked to score, and raises at the first candidate of task `fail_on`, as a call's time limit
    would end the evaluation there."""

    speedups = {extract_code(reply_text(CODES[0])): 2.0, extract_code(reply_text(CODES[1])): 1.05}

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on, self.tasks = fail_on, set()

    def at_size(self, size):
        return self

    def submit(self, batch):
        results = []
        for candidate in batch:
            task = Path(candidate.task).stem
            if task == self.fail_on:
                raise RuntimeError("the device call ended")
            self.tasks.add(task)
            speedup = self.speedups.get(extract_code(candidate.code))
            status = "ok" if speedup is not None else "incorrect"
            reward, reason = compute_reward(status=status, correct=speedup is not None, hacks=[], speedup=speedup,
                                            coverage=1.0 if speedup else None, weights=RewardWeights())
            results.append(EvalResult(candidate.id, task, status, reward, reason, correct=speedup is not None,
                                      speedup=speedup, kernel_ms=None if speedup is None else 1.0, ref_ms=speedup))
        return results


def held_out(gym, out, config=CONFIG, deadline=None):
    return HeldOut({"heldout": TASKS}, gym, ROLLOUT, config, {"evaluation": "settings"}, out, code=None,
                   deadline=deadline)


@pytest.fixture
def uninterrupted(tiny_policy, tmp_path_factory):
    policy = PickingPolicy(tiny_policy)
    gym = CodeGym()
    out = tmp_path_factory.mktemp("whole")
    rows, _ = held_out(gym, out).measure(policy, "before RL")
    assert gym.tasks == ALL
    return policy, rows, json.loads((out / REPLIES_FILE).read_text())


def test_a_killed_evaluation_goes_on_where_it_stopped(uninterrupted, tmp_path, capsys):
    policy, rows, replies = uninterrupted
    assert len({r["metrics"]["reward/mean"] for r in rows}) > 1  # the sampler's picks vary the rewards
    with pytest.raises(RuntimeError, match="device call ended"):
        held_out(CodeGym(fail_on="gelu_tanh"), tmp_path).measure(policy, "before RL")  # dies in the third chunk
    assert (tmp_path / PROGRESS_FILE).is_file()
    gym = CodeGym()
    resumed, seconds = held_out(gym, tmp_path).measure(policy, "before RL")
    assert gym.tasks == {"gelu_tanh"} and resumed == rows and seconds > 0  # only the third chunk measured again
    printed = capsys.readouterr().out.splitlines()[-2]  # each chunk says where its time went
    assert re.fullmatch(r"evaluation before RL: heldout \(cpu\) chunk 3 of 3, 3 episodes in \d+ s "
                        r"\(\d+ s sampling, \d+ s waiting for the gym\)", printed), printed
    assert json.loads((tmp_path / REPLIES_FILE).read_text()) == replies  # the kept chunks keep their replies too


def test_a_deadline_stops_the_evaluation_between_chunks(uninterrupted, tmp_path):
    """No chunk starts that would end past the deadline, reckoned CHUNK_MARGIN times as long as the longest chunk
    measured (or the mean chunk of the run's earlier measurement); the chunks before are kept, and a later call goes
    on from them."""
    policy, rows, _ = uninterrupted
    with pytest.raises(RuntimeError):
        held_out(CodeGym(fail_on="silu"), tmp_path).measure(policy, "before RL")  # relu's chunk is kept
    gym = CodeGym()
    with pytest.raises(OutOfTime, match=r"stopped before heldout \(cpu\) chunk 2: ~\d+ s, 0 s left of max_time_s"):
        held_out(gym, tmp_path, deadline=time.monotonic() - 1).measure(policy, "before RL")
    assert gym.tasks == set() and (tmp_path / PROGRESS_FILE).is_file()
    evaluation = held_out(gym, tmp_path, deadline=time.monotonic() + 3600)
    resumed, seconds = evaluation.measure(policy, "before RL")
    assert resumed == rows and gym.tasks == {"silu", "gelu_tanh"}
    assert evaluation.chunk_s == pytest.approx(seconds / len(TASKS))  # the next measurement's first guess
    evaluation.done()
    # An earlier measurement's chunks took 55 minutes: with the hour left, one fits, but not with the margin that
    # chunks of one evaluation differ by, so none starts.
    evaluation.chunk_s = 3300.0
    with pytest.raises(OutOfTime, match=f"chunk 1: ~{3300 * CHUNK_MARGIN:.0f} s, \\d+ s left"):
        evaluation.measure(policy, "after 3 steps")
    assert gym.tasks == {"silu", "gelu_tanh"}


def test_the_replies_of_the_first_tasks_are_kept_by_phase(uninterrupted, tmp_path):
    """What the policy wrote, beside the proportions: the first episode of each set's first `replies` tasks."""
    policy, _, replies = uninterrupted
    shown = replies["before RL"]
    assert [(r["set"], r["size"], r["task"]) for r in shown] == [("heldout", "cpu", "relu"), ("heldout", "cpu", "silu")]
    for reply in shown:
        assert len(reply["turns"]) == CONFIG.turns
        for turn in reply["turns"]:
            assert turn["reply"] in {reply_text(code) for code in CODES}
            assert turn["feedback"].startswith(f"status: {turn['status']}")
    held_out(CodeGym(), tmp_path, replace(CONFIG, replies=0)).measure(policy, "after 3 steps")
    held_out(CodeGym(), tmp_path).measure(policy, "before RL")
    kept = json.loads((tmp_path / REPLIES_FILE).read_text())
    assert kept == {"after 3 steps": [], "before RL": shown}


def test_kept_chunks_are_reused_only_for_the_same_phase_and_weights(uninterrupted, tmp_path):
    policy, _, _ = uninterrupted

    def killed_after_relu():
        with pytest.raises(RuntimeError):
            held_out(CodeGym(fail_on="silu"), tmp_path).measure(policy, "before RL")

    def measured(phase="before RL"):
        gym = CodeGym()
        evaluation = held_out(gym, tmp_path)
        evaluation.measure(policy, phase)
        evaluation.done()  # as before_rl and after_rl do once they have kept the rows
        return gym.tasks

    killed_after_relu()
    assert measured("after 3 steps") == ALL
    killed_after_relu()
    with torch.no_grad():  # rounded through bf16, as `proxycomp shards` carries weights: the same policy
        for p in policy.module.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    assert measured() == {"silu", "gelu_tanh"}
    killed_after_relu()
    with torch.no_grad():  # a trained change: another policy, measured from the start
        next(policy.module.parameters()).add_(0.01)
    assert measured() == ALL


def test_a_damaged_progress_file_is_measured_again(uninterrupted, tmp_path, capsys):
    policy, rows, _ = uninterrupted
    (tmp_path / PROGRESS_FILE).write_text('{"key": ')
    gym = CodeGym()
    again, _ = held_out(gym, tmp_path).measure(policy, "before RL")
    assert gym.tasks == ALL and again == rows and "unreadable" in capsys.readouterr().out


def test_chunk_tasks_must_be_positive():
    with pytest.raises(RLConfigError, match="evaluation.chunk_tasks"):
        parse_config(["--ckpt", "x", "--evaluation.chunk_tasks", "0"])


def test_replies_must_not_be_negative():
    with pytest.raises(RLConfigError, match=r"evaluation.replies: must be >= 0 \(0: none kept\), got -1"):
        parse_config(["--ckpt", "x", "--evaluation.replies", "-1"])


def test_a_warm_start_carried_as_shards_is_the_policy_its_kept_chunks_belong_to(tiny_policy, tiny_hparams, tmp_path):
    """`proxycomp shards` rounds the weights through bf16: the evaluation of a warm start goes on after the model
    travels to another machine that way."""
    from proxycomp.checkpoint import (join_checkpoint, model_weights, read_checkpoint, save_lm, split_checkpoint,
                                      weights_digest)

    save_lm(tmp_path / "model.ckpt", tiny_hparams, tiny_policy.module, None)
    split_checkpoint(tmp_path / "model.ckpt", tmp_path / "carry")
    join_checkpoint(tmp_path / "carry", tmp_path / "joined.ckpt")
    carried = model_weights(read_checkpoint(tmp_path / "joined.ckpt"))
    assert weights_digest(carried) == weights_digest(tiny_policy.module.state_dict())
    name, tensor = next(iter(carried.items()))
    assert not torch.equal(tensor, tiny_policy.module.state_dict()[name])  # it was rounded
