"""Overlapped rollout (the policy generates one group's turn while the gym scores another's) against the
sequential schedule, with the real tiny byte policy and the real CPU gym (LocalPool)."""
import json
import time
import warnings
from dataclasses import replace

import pytest
import torch
from lightning.fabric import Fabric

from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool
from proxycomp.gym_bridge.policy import ByteLMPolicy
from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config
from proxycomp.gym_bridge.rl.episode import first_prompt
from proxycomp.gym_bridge.rl.rollout import RolloutConfig, run_episodes
from proxycomp.gym_bridge.rl.algorithm import AlgorithmConfig
from proxycomp.gym_bridge.rl.trainer import RLTrainer
from proxycomp.gym_bridge.rl.warmstart import reply_text
from proxycomp.gym_bridge.tasks import load_task

RELU, SILU = load_task("relu"), load_task("silu")
SOLUTION = RELU.solution_path.read_text()
REPLIES = (reply_text(SOLUTION), reply_text(SOLUTION.replace("tl.where(x > 0", "tl.where(x < 0")), "no code here")
HANG = reply_text(SOLUTION.replace("x = x.contiguous()", "while True:\n            pass"))
# 2 tasks x 3 samples in 3 groups of 2: group 1 holds a relu and a silu trajectory (relu code fails on silu).
CONFIG = RolloutConfig(turns=3, samples_per_task=3, max_bytes=96, prompt_max_bytes=512, overlap_groups=3)
TASKS = [RELU, SILU]


class PickingPolicy:
    """The real tiny policy samples every reply; the sampled symbols pick which of ``replies`` is sent as its
    text, so the gym scores real (correct, broken or missing) code chosen by the real sampler. Tokens and
    log-probs stay the sampled ones, so comparing them compares the sampler's draws."""

    def __init__(self, inner, replies=REPLIES) -> None:
        self.inner, self.module, self.replies = inner, inner.module, replies

    def generate(self, prompts, n, max_bytes, temperature, top_p, generator=None):
        out = self.inner.generate(prompts, n, max_bytes, temperature, top_p, generator=generator)
        return [[replace(s, text=self.replies[sum(s.tokens) % len(self.replies)]) for s in group] for group in out]

    def score(self, prompts, replies, temperature):
        return self.inner.score(prompts, replies, temperature)

    def encode_reply(self, text):
        return self.inner.encode_reply(text)


class FaultyGym:
    """The real gym, except that a batch holding candidate ``fail_id`` raises, and candidate ``hang_id`` has
    its code swapped for an infinite loop (the pool's wall timeout must kill it)."""

    def __init__(self, gym, fail_id: str = "", hang_id: str = "") -> None:
        self.gym, self.fail_id, self.hang_id = gym, fail_id, hang_id
        self.batches: list[list[str]] = []

    def submit(self, batch):
        self.batches.append([c.id for c in batch])
        if any(c.id == self.fail_id for c in batch):
            raise RuntimeError("gym down")
        return self.gym.submit([replace(c, code=HANG) if c.id == self.hang_id else c for c in batch])


def rollout(policy, gym, config=CONFIG, seed=7, **kwargs):
    return run_episodes(policy, gym, TASKS, config, generator=torch.Generator().manual_seed(seed), **kwargs)


def turn_record(turn):
    return (turn.prompt, turn.reply, turn.code, turn.tokens, turn.logprobs.tolist(), turn.reward, turn.correct,
            turn.hacks, turn.feedback)


def records(trajectories):
    return [(t.task_id, [turn_record(turn) for turn in t.turns]) for t in trajectories]


def timed(fn):
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started


@pytest.fixture(scope="module")
def gym():
    """One warm gym worker; with one torch thread for the policy, each side has a core of a 2-core machine."""
    # A fixed seed: the feedback (max abs error) must be the same in both schedules.
    config = EvalConfig(size="cpu", correct_trials=2, timeout_s=10, seed=1234)
    with Evaluator(LocalPool(num_workers=1), config) as evaluator:
        evaluator.submit([Candidate(str(RELU.path), REPLIES[0])])
        yield evaluator


@pytest.fixture
def reference(gym, make_tiny_transformer):
    """A picking policy, its trajectories under the sequential schedule and that run's wall time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = PickingPolicy(ByteLMPolicy(make_tiny_transformer()))
        trajectories, seconds = timed(lambda: rollout(policy, gym, overlap=False))
        yield policy, trajectories, seconds
    finally:
        torch.set_num_threads(threads)


def test_overlapped_rollout_equals_the_sequential_one(reference, gym):
    policy, expected, sequential_s = reference
    got, overlapped_s = timed(lambda: rollout(policy, gym))
    one_group, one_group_s = timed(lambda: rollout(policy, gym, replace(CONFIG, overlap_groups=1)))
    assert records(got) == records(expected)
    # The comparison covers something: several outcomes, every episode played to the turn limit.
    assert {turn.correct for t in expected for turn in t.turns} == {True, False}
    assert {len(t.turns) for t in expected} == {CONFIG.turns}
    assert records(one_group) != records(expected)  # other batches, other draws: only the schedule may not matter
    turns = sum(len(t.turns) for t in expected)
    print(f"\nrollout wall time, 1 torch thread, 1 gym worker: {CONFIG.overlap_groups} groups sequential "
          f"{sequential_s:.2f} s, overlapped {overlapped_s:.2f} s ({turns} turns); 1 group {one_group_s:.2f} s "
          f"({sum(len(t.turns) for t in one_group)} turns, other samples)")


def test_cut_prompts_and_replies_fill_the_context_exactly(tiny_policy, cpu_gym, tmp_path):
    """prompt_max_bytes counts the symbols that open a raw-byte prompt, so prompts cut to it and replies of
    max_bytes fit a context of their sum (cut to the bytes alone, they overflowed it by two)."""
    config = RolloutConfig(turns=2, samples_per_task=2, max_bytes=64, prompt_max_bytes=700)
    policy = PickingPolicy(ByteLMPolicy(tiny_policy.module, max_context=config.prompt_max_bytes + config.max_bytes))
    # Long lines at both ends of the reference leave the middle cut no line to snap to: it lands on the limit.
    task_file = tmp_path / "relu_long_lines.py"
    task_file.write_text(f"# {'x' * 900}\n{RELU.source}\n# {'y' * 900}\n")
    long_ends = load_task(str(task_file))
    got = run_episodes(policy, cpu_gym, [long_ends], config, generator=torch.Generator().manual_seed(5))
    lengths = [len(policy.inner.encode_prompt(t.turns[0].prompt)) for t in got]
    assert lengths == [config.prompt_max_bytes] * 2 and all(len(t.turns) == 2 for t in got)


def test_one_group_samples_from_the_step_generator_as_before(tiny_policy, cpu_gym):
    config = RolloutConfig(turns=1, samples_per_task=3, max_bytes=48, prompt_max_bytes=512)
    got = run_episodes(tiny_policy, cpu_gym, [RELU], config, generator=torch.Generator().manual_seed(3))
    prompt = first_prompt(RELU.source, config.instructions, max_bytes=config.prompt_max_bytes)
    direct = tiny_policy.generate([prompt] * 3, 1, config.max_bytes, config.temperature, config.top_p,
                                  generator=torch.Generator().manual_seed(3))
    assert [t.turns[0].tokens for t in got] == [s[0].tokens for s in direct]


def test_without_a_generator_the_groups_draw_from_the_global_rng(tiny_policy, cpu_gym):
    config = replace(CONFIG, turns=2, max_bytes=48)
    runs = []
    for overlap in (False, True):
        torch.manual_seed(11)
        runs.append(records(run_episodes(tiny_policy, cpu_gym, TASKS, config, overlap=overlap)))
    assert runs[0] == runs[1]


def test_each_group_submits_its_own_turns_in_order(tiny_policy, cpu_gym):
    gym = FaultyGym(cpu_gym)
    policy = PickingPolicy(tiny_policy, replies=("no code here",))  # no code never repeats: every turn is judged
    rollout(policy, gym, replace(CONFIG, turns=2, overlap_groups=4))
    assert sorted(gym.batches) == sorted([[f"{i}.{t}" for i in group] for group in ([0, 1], [2, 3], [4], [5])
                                          for t in range(2)])
    for group in ("0", "2", "4", "5"):
        assert [b[0] for b in gym.batches if b[0].startswith(group + ".")] == [f"{group}.0", f"{group}.1"]
    gym.batches.clear()
    rollout(policy, gym, replace(CONFIG, turns=1, overlap_groups=50))  # capped at one group per trajectory
    assert sorted(gym.batches) == [[f"{i}.0"] for i in range(6)]


@pytest.mark.parametrize("fail_id", ["2.0", "3.1"])
@pytest.mark.parametrize("overlap", [False, True])
def test_a_failing_group_is_dropped_and_the_others_are_kept(tiny_policy, cpu_gym, fail_id, overlap):
    policy = PickingPolicy(tiny_policy, replies=("no code here",))
    config = replace(CONFIG, turns=2, max_bytes=48)
    expected = records(rollout(policy, cpu_gym, config))
    with pytest.warns(RuntimeWarning, match=f"trajectories 2-3 failed at turn {fail_id[-1]}.*gym down"):
        got = rollout(policy, FaultyGym(cpu_gym, fail_id=fail_id), config, overlap=overlap)
    assert records(got) == expected[:2] + expected[4:]


@pytest.mark.parametrize("groups, dropped, last", [(1, 0, "0.0"), (3, 2, "4.0")])
def test_when_every_group_fails_the_last_failure_is_raised(tiny_policy, groups, dropped, last):
    class DownGym:
        def submit(self, batch):
            raise RuntimeError(f"gym down at {batch[0].id}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=f"gym down at {last}"):
            rollout(PickingPolicy(tiny_policy), DownGym(), replace(CONFIG, overlap_groups=groups))
    assert sum("rollout: scoring" in str(w.message) for w in caught) == dropped


def test_a_timed_out_candidate_costs_only_its_own_result(reference, gym):
    policy, expected, _ = reference
    got = rollout(policy, FaultyGym(gym, hang_id="2.0"))
    hung = got[2].turns[0]
    assert hung.reward == 0.0 and not hung.correct and "status: timeout" in hung.feedback
    assert turn_record(got[3].turns[0]) == turn_record(expected[3].turns[0])  # same group, same turn
    assert records(got[:2] + got[4:]) == records(expected[:2] + expected[4:])


def test_the_trainer_logs_dropped_episodes(make_tiny_transformer, cpu_gym, tmp_path, tiny_hparams):
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true")
    module = fabric.setup_module(make_tiny_transformer())
    rollout_config = RolloutConfig(turns=1, samples_per_task=4, max_bytes=24, prompt_max_bytes=512, overlap_groups=2)
    trainer = RLTrainer(fabric=fabric, policy=ByteLMPolicy(module),
                        evaluator=FaultyGym(cpu_gym, fail_id="1.0"), tasks=[RELU], rollout=rollout_config,
                        algorithm=AlgorithmConfig(lr=1e-3), out_dir=tmp_path, tasks_per_step=1, seed=0, save_every=1,
                        hyper_parameters=tiny_hparams)
    with pytest.warns(RuntimeWarning, match="trajectories 0-1 failed"):
        metrics = trainer.train_step()
    assert metrics["rollout/dropped"] == 2
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["rollout/dropped"] == 2


def test_overlap_groups_is_a_config_field():
    config, *_ = parse_config(["--ckpt", "x", "--rollout.overlap_groups", "4"])
    assert config.rollout.overlap_groups == 4
    with pytest.raises(RLConfigError, match="overlap_groups"):
        parse_config(["--ckpt", "x", "--rollout.overlap_groups", "0"])
