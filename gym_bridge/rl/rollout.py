"""Multi-turn kernel episodes: sample replies, score every turn in the gym, carry feedback forward.

Turn 0 prompts each trajectory with the task's reference (:func:`episode.first_prompt`); turn t > 0 with
the previous code and the gym's feedback on it (:func:`episode.next_prompt`). All candidates of a turn go
to the gym in ONE ``Evaluator.submit`` call, so the pool evaluates them in parallel.

A trajectory stops early when its last turn is *done* or *stuck*:

- done: correct, not flagged, and its speedup reaches ``stop_speedup`` (an untimed correct turn, as on
  CPU, counts as done: nothing more can be measured);
- stuck: the extracted code is identical to the previous turn's, so the next prompt would be the same.

Trajectories stopped early simply have fewer turns; :func:`episode.stack_turns` masks the rest.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..config import Candidate
from ..evaluator import Evaluator
from ..extract import extract_code
from ..policy import Policy, Sample
from ..result import EvalResult
from ..tasks import Task
from .episode import DEFAULT_INSTRUCTIONS, Trajectory, Turn, first_prompt, next_prompt


@dataclass
class RolloutConfig:
    turns: int = 3  # most turns per trajectory (the reference recipe's MAX_TURN)
    samples_per_task: int = 8  # trajectories per task: the group the advantage baseline is taken over
    max_bytes: int = 2048  # most reply bytes per turn
    prompt_max_bytes: int | None = 4096  # prompts are cut (middle of long sections) to this many bytes
    temperature: float = 1.0
    top_p: float = 1.0
    stop_speedup: float = 1.2  # a correct turn at least this fast ends its trajectory
    instructions: str = DEFAULT_INSTRUCTIONS

    def __post_init__(self) -> None:
        if self.turns < 1 or self.samples_per_task < 1 or self.max_bytes < 1:
            raise ValueError("rollout.turns, rollout.samples_per_task and rollout.max_bytes: must be >= 1")
        if self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"rollout: need temperature > 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")


def turn_from_result(prompt: str, sample: Sample, result: EvalResult) -> Turn:
    return Turn(
        prompt=prompt,
        reply=sample.text,
        code=extract_code(sample.text),
        reward=result.reward,
        correct=result.correct,
        coverage=result.coverage,
        hacks=tuple(result.hacks),
        feedback=result.feedback(),
        logprobs=torch.tensor(sample.logprobs, dtype=torch.float32),
        tokens=list(sample.tokens),
        speedup=result.speedup,
    )


def is_finished(trajectory: Trajectory, stop_speedup: float) -> bool:
    """Done (correct and fast enough, or untimed) or stuck (same code as the turn before)."""
    last = trajectory.turns[-1]
    if last.correct and not last.hacked and (last.speedup is None or last.speedup >= stop_speedup):
        return True
    return len(trajectory.turns) > 1 and last.code is not None and last.code == trajectory.turns[-2].code


def run_episodes(
    policy: Policy,
    evaluator: Evaluator,
    tasks: Sequence[Task],
    config: RolloutConfig,
    *,
    generator: torch.Generator | None = None,
) -> list[Trajectory]:
    """``config.samples_per_task`` trajectories per task, task-major (all of task 0's first)."""
    if not tasks:
        raise ValueError("run_episodes: no tasks given")
    trajectories = [Trajectory(task.name, task.source) for task in tasks for _ in range(config.samples_per_task)]
    paths = {task.name: str(task.path) for task in tasks}  # a path also resolves a user's task file
    active = list(range(len(trajectories)))
    for turn_index in range(config.turns):
        prompts = []
        for i in active:
            traj = trajectories[i]
            if turn_index == 0:
                prompts.append(first_prompt(traj.task_source, config.instructions, max_bytes=config.prompt_max_bytes))
            else:
                last = traj.turns[-1]
                prompts.append(next_prompt(traj, last.feedback, config.instructions, max_bytes=config.prompt_max_bytes))
        samples = [group[0] for group in policy.generate(
            prompts, 1, config.max_bytes, config.temperature, config.top_p, generator=generator)]
        candidates = [Candidate(paths[trajectories[i].task_id], s.text, f"{i}.{turn_index}")
                      for i, s in zip(active, samples)]
        results = evaluator.submit(candidates)
        for i, prompt, sample, result in zip(active, prompts, samples, results):
            trajectories[i].turns.append(turn_from_result(prompt, sample, result))
        active = [i for i in active if not is_finished(trajectories[i], config.stop_speedup)]
        if not active:
            break
    return trajectories
