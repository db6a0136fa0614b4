"""Held-out evaluation of a policy: episodes on chosen tasks at a chosen problem size, summarised per task.

Run before and after RL on the same tasks, sizes and sampling settings, the two summaries form the
before/after table (reward and fast@1.2 being the headline columns).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from ..config import SIZES
from ..evaluator import Evaluator
from ..policy import Policy
from ..tasks import Task
from .rollout import RolloutConfig, run_episodes
from .trainer import rollout_metrics

SUMMARY_COLUMNS = ("reward/turn0", "reward/final", "correct/final", "fast@1", "fast@1.2")


@dataclass
class EvaluationConfig:
    """The held-out evaluation before and after RL.

    Args:
        tasks: tasks to evaluate on (shipped names or task file paths); null: the train tasks
        sizes: gym problem sizes, e.g. [gpu_heldout]
        samples_per_task: episodes per task
        turns: most turns per episode
        temperature: sampling temperature
        top_p: nucleus sampling mass
        seed: sampling seed (the same before and after RL)
    """

    tasks: list[str] | None = None
    sizes: list[str] = field(default_factory=lambda: ["cpu"])
    samples_per_task: int = 4
    turns: int = 3
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 12345

    def __post_init__(self) -> None:
        if self.samples_per_task < 1 or self.turns < 1:
            raise ValueError("evaluation.samples_per_task and evaluation.turns: must be >= 1")
        unknown = [size for size in self.sizes if size not in SIZES]
        if unknown or not self.sizes:
            raise ValueError(f"evaluation.sizes: {unknown or 'empty'}; use sizes from {', '.join(SIZES)}")


@dataclass
class EvalRow:
    phase: str
    size: str
    task: str  # a task name, or "all"
    metrics: dict[str, float]


def evaluate_policy(
    policy: Policy, evaluator: Evaluator, size: str, tasks: Sequence[Task], rollout: RolloutConfig,
    config: EvaluationConfig, phase: str,
) -> list[EvalRow]:
    """One row per task plus an "all" row; sampling is seeded so phases see the same random stream."""
    episode_config = replace(rollout, samples_per_task=config.samples_per_task, turns=config.turns,
                             temperature=config.temperature, top_p=config.top_p)
    generator = torch.Generator(device=next(policy.module.parameters()).device).manual_seed(config.seed)
    trajectories = run_episodes(policy, evaluator, tasks, episode_config, generator=generator)
    rows = [EvalRow(phase, size, task.name, rollout_metrics([t for t in trajectories if t.task_id == task.name]))
            for task in tasks]
    rows.append(EvalRow(phase, size, "all", rollout_metrics(trajectories)))
    return rows


def format_table(rows: Sequence[EvalRow]) -> str:
    """A Markdown table, one line per (phase, size, task)."""
    header = ["phase", "size", "task", *SUMMARY_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row.phase, row.size, row.task, *(f"{row.metrics[c]:.3f}" for c in SUMMARY_COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
