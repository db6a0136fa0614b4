"""Held-out evaluation of a policy: episodes on named sets of tasks at a chosen problem size, summarised per task
and per set.

The sets are a task set's splits (``evaluation.splits``, e.g. the generated family's held-out split), explicit
``evaluation.tasks``, and the shipped tasks (``evaluation.shipped``: a second held-out set); with none of them, the
train tasks. Run before and after RL on the same sets, sizes and sampling settings, the summaries form the
before/after table; `rl.compare` adds confidence intervals.

A set is measured in chunks of `evaluation.chunk_tasks` tasks (one chunk: the whole set), each sampled from its own
seeded generator; every finished chunk's episodes are kept in OUT/eval_progress.json under the key of what is
measured (phase, settings, the weights rounded to bf16), so an evaluation killed by a device call's time limit goes
on in the next call where it stopped, and gives the rows an uninterrupted one would. Given a deadline (the run's
`max_time_s`), a measurement stops before a chunk that would end past it (a chunk is reckoned CHUNK_MARGIN times as
long as the longest one measured), so a call spends its last minutes on nothing it will throw away.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from proxycomp.checkpoint import weights_digest
from proxycomp.files import write_atomic

from ..config import SIZES
from ..evaluator import Evaluator
from ..policy import Policy
from ..tasks import Task
from ._checks import RLConfigError
from .code_bpb import CodeBpb
from .episode import Trajectory, Turn, rollout_metrics
from .rollout import RolloutConfig, run_episodes

# Per-episode proportions (what compare gives intervals for), then mean rewards.
SUMMARY_COLUMNS = ("correct/turn0", "correct/any", "fast@1.2/turn0", "fast@1.2/best", "reward/turn0", "reward/final")
PER_TASK_ROWS = 8  # the table lists each task of a set only for sets this small (eval_*.json always holds them)
PROGRESS_FILE = "eval_progress.json"  # in OUT/: the finished chunks of a measurement under way
REPLIES_FILE = "eval_replies.json"  # in OUT/: what the policy wrote, a few episodes per set and phase
RECORDED = ("reward", "status", "correct", "coverage", "hacks", "speedup")  # the turn fields rollout_metrics reads


@dataclass
class EvaluationConfig:
    """The held-out evaluation before and after RL, on one or more named sets of tasks.

    Args:
        tasks: shipped task names or task files, the set "tasks"
        splits: splits of RLConfig.task_set, one set each, e.g. [heldout]
        shipped: also the shipped tasks, the set "shipped" (a second held-out set)
        max_tasks: N tasks of each evaluated set, to fit a budget, drawn across its templates (round-robin over the
            task categories, each shuffled by `seed`); null: all. A generated family's split is evaluated per bucket
            (held-out op, reserved composition), each its own set "SPLIT:BUCKET" with its own N
        sizes: gym problem sizes, e.g. [gpu_heldout]
        samples_per_task: episodes per task: a set's episodes are samples_per_task x its tasks
        turns: most turns per episode
        temperature: sampling temperature
        top_p: nucleus sampling mass
        seed: sampling seed (the same before and after RL); chunk i of a set samples from seed + i
        chunk_tasks: tasks per chunk of a set, the unit an interrupted evaluation goes on from (a chunk's episodes
            are generated together, so small chunks cost generation time); null: the whole set in one chunk
        code_files: code the policy was not pretrained on, whose bits per byte are reported for --ckpt, before and
            after RL (what tuning costs the language model): a file, a folder's *.py files or a glob; null:
            proxycomp's own core sources
        code_bytes: score the first whole files of code_files up to this many bytes; 0: no such report
        replies: the first episode of each set's first N tasks, turn by turn (verdict, reply, the gym's feedback),
            kept in OUT/eval_replies.json by phase: what the policy writes, which the proportions cannot show
    """

    tasks: list[str] | None = None
    splits: list[str] = field(default_factory=list)
    shipped: bool = False
    max_tasks: int | None = None
    sizes: list[str] = field(default_factory=lambda: ["cpu"])
    samples_per_task: int = 4
    turns: int = 3
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 12345
    chunk_tasks: int | None = None
    code_files: str | None = None
    code_bytes: int = 65536
    replies: int = 2

    def __post_init__(self) -> None:
        if self.samples_per_task < 1 or self.turns < 1 or any(n is not None and n < 1 for n in (
                self.max_tasks, self.chunk_tasks)):
            raise RLConfigError("evaluation.samples_per_task, evaluation.turns, evaluation.max_tasks and "
                                "evaluation.chunk_tasks: must be >= 1")
        if self.replies < 0:
            raise RLConfigError(f"evaluation.replies: must be >= 0 (0: none kept), got {self.replies}")
        if self.code_bytes < 0:
            raise RLConfigError(f"evaluation.code_bytes: must be >= 0 (0: no report), got {self.code_bytes}")
        unknown = [size for size in self.sizes if size not in SIZES]
        if unknown or not self.sizes:
            raise RLConfigError(f"evaluation.sizes: {unknown or 'empty'}; use sizes from {', '.join(SIZES)}")

    def chunk_width(self, tasks: int) -> int:
        """Tasks per chunk of a set of `tasks` tasks."""
        return self.chunk_tasks or max(tasks, 1)


# Chunks of one evaluation differ in length (on an H100, 145-164 s for 92 episodes; a bucket's chunks can be longer
# than those of the bucket before, which set the estimate), and a run started by compare_rl counts its max_time_s
# from after its imports: reckoned as long as the longest so far, a 164 s chunk started after 155 s ones ran into the
# device call's kill.
CHUNK_MARGIN = 1.15


class OutOfTime(Exception):
    """A measurement stopped before a chunk that would end past its deadline; the chunks before are kept."""


@dataclass
class EvalRow:
    phase: str
    size: str
    split: str  # the evaluated set: a split of the task set, "tasks", "shipped" or "train"
    task: str  # a task name, or "all"
    metrics: dict[str, float]


def _record(trajectory: Trajectory) -> dict:
    return {"task": trajectory.task_id, "turns": [{f: getattr(t, f) for f in RECORDED} for t in trajectory.turns]}


def _replies(trajectories: Sequence[Trajectory], tasks: Sequence[Task]) -> list[dict]:
    """The first episode of each of `tasks`, turn by turn: the verdict, the reply and the gym's feedback."""
    first: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        first.setdefault(trajectory.task_id, trajectory)
    return [{"task": task.name, "turns": [{"status": t.status, "reply": t.reply, "feedback": t.feedback}
                                          for t in first[task.name].turns]} for task in tasks if task.name in first]


def _replay(record: dict) -> Trajectory:
    return Trajectory(record["task"], "", [Turn("", "", **{**turn, "hacks": tuple(turn["hacks"])})
                                           for turn in record["turns"]])


class Progress:
    """A measurement's finished chunks (their episodes as the fields the metrics read, and seconds), kept in a JSON
    file under the key of what is measured: a killed measurement goes on from them; another key, or a damaged file,
    starts over."""

    def __init__(self, path: Path, key: dict) -> None:
        self.path, self.key, self.chunks = path, json.loads(json.dumps(key)), {}
        if path.is_file():
            try:
                kept = json.loads(path.read_text())
                if kept["key"] == self.key:
                    self.chunks = dict(kept["chunks"])
            except (ValueError, KeyError, TypeError) as err:
                print(f"evaluation: {path} is unreadable ({err!r}); measuring from the start", flush=True)

    def get(self, name: str) -> tuple[list[Trajectory], float, list[dict]] | None:
        chunk = self.chunks.get(name)
        if chunk is None:
            return None
        return [_replay(r) for r in chunk["episodes"]], chunk["seconds"], chunk.get("replies", [])

    def put(self, name: str, trajectories: Sequence[Trajectory], seconds: float, replies: list[dict]) -> None:
        self.chunks[name] = {"seconds": seconds, "episodes": [_record(t) for t in trajectories], "replies": replies}
        write_atomic(self.path, json.dumps({"key": self.key, "chunks": self.chunks}))


def evaluate_policy(
    policy: Policy, evaluator: Evaluator, size: str, sets: dict[str, Sequence[Task]], rollout: RolloutConfig,
    config: EvaluationConfig, phase: str, progress: Progress | None = None, deadline: float | None = None,
    chunk_s: float = 0.0,
) -> tuple[list[EvalRow], float, list[dict]]:
    """Per set, one row per task plus an "all" row; the seconds measuring took (chunks taken from `progress`
    count the seconds they took then); and the replies of `config.replies` tasks per set. Chunk i of every set
    samples from seed + i, so phases see the same random stream; all samples of a task fall in one chunk.
    Raises OutOfTime before a chunk that, CHUNK_MARGIN times as long as the longest seen (or `chunk_s`), would end
    past `deadline` (a `time.monotonic()` instant)."""
    episode_config = replace(rollout, samples_per_task=config.samples_per_task, turns=config.turns,
                             temperature=config.temperature, top_p=config.top_p)
    device = next(policy.module.parameters()).device
    rows, seconds, replies = [], 0.0, []
    longest = max([chunk_s, *(c["seconds"] for c in progress.chunks.values())] if progress is not None else [chunk_s])
    for split, tasks in sets.items():
        trajectories = []
        width = config.chunk_width(len(tasks))
        for index, start in enumerate(range(0, len(tasks), width)):
            name = f"{size}|{split}|{index}"
            kept = progress.get(name) if progress is not None else None
            if kept is None:
                started, timings = time.monotonic(), {}
                if deadline is not None and started + longest * CHUNK_MARGIN > deadline:
                    raise OutOfTime(f"evaluation {phase}: stopped before {split} ({size}) chunk {index + 1}: "
                                    f"~{longest * CHUNK_MARGIN:.0f} s, {max(deadline - started, 0):.0f} s left of "
                                    "max_time_s")
                generator = torch.Generator(device=device).manual_seed(config.seed + index)
                done = run_episodes(policy, evaluator, tasks[start:start + width], episode_config, generator=generator,
                                    timings=timings)
                shown = _replies(done, tasks[start:min(start + width, config.replies)])
                kept = done, time.monotonic() - started, shown
                # Where a chunk's time goes (sampling, or waiting for the gym's workers) sizes the next plan.
                print(f"evaluation {phase}: {split} ({size}) chunk {index + 1} of {-(-len(tasks) // width)}, "
                      f"{len(done)} episodes in {kept[1]:.0f} s ({timings['generate_s']:.0f} s sampling, "
                      f"{timings['gym_wait_s']:.0f} s waiting for the gym)", flush=True)
                if progress is not None:
                    progress.put(name, *kept)
                longest = max(longest, kept[1])
            trajectories += kept[0]
            seconds += kept[1]
            replies += [{"size": size, "set": split, **reply} for reply in kept[2]]
        rows += [EvalRow(phase, size, split, task.name,
                         rollout_metrics([t for t in trajectories if t.task_id == task.name])) for task in tasks]
        rows.append(EvalRow(phase, size, split, "all", rollout_metrics(trajectories)))
    return rows, seconds, replies


def format_table(rows: Sequence[EvalRow]) -> str:
    """A Markdown table, one line per (phase, size, set) and, for small sets, per task."""
    tasks_per_set: dict[tuple[str, str, str], int] = {}
    for row in rows:
        key = (row.phase, row.size, row.split)
        tasks_per_set[key] = tasks_per_set.get(key, 0) + (row.task != "all")
    header = ["phase", "size", "set", "task", "episodes", *SUMMARY_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if row.task != "all" and tasks_per_set[(row.phase, row.size, row.split)] > PER_TASK_ROWS:
            continue
        cells = [row.phase, row.size, row.split, row.task, f"{row.metrics['episodes']:.0f}",
                 *(f"{row.metrics[c]:.3f}" for c in SUMMARY_COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class HeldOut:
    """The held-out evaluation of one run: the policy on `sets` at every size of `config.sizes`, judged by
    `evaluator` at that size (over its pool), its rows kept in OUT/eval_before.json and OUT/eval_after.json and
    tabled in OUT/eval.md with the `code` figures. `settings` (what decides what it measures) key the rows kept
    beside a warm start. With a `deadline` (a `time.monotonic()` instant) a measurement raises OutOfTime before a
    chunk that would end past it, reckoning a chunk CHUNK_MARGIN times as long as the longest one measured, or as
    the mean chunk of an earlier measurement of this run."""

    def __init__(self, sets: dict[str, Sequence[Task]], evaluator: Evaluator, rollout: RolloutConfig,
                 config: EvaluationConfig, settings: dict, out_dir: Path, code: CodeBpb,
                 deadline: float | None = None) -> None:
        self.sets, self.evaluator, self.rollout, self.config = sets, evaluator, rollout, config
        self.settings, self.out_dir, self.code, self.deadline = settings, Path(out_dir), code, deadline
        self.chunk_s = 0.0  # the mean chunk of the measurements so far: the first chunk of the next one is as long

    def _took(self, seconds: float) -> None:
        chunks = sum(-(-len(tasks) // self.config.chunk_width(len(tasks))) for tasks in self.sets.values())
        self.chunk_s = max(self.chunk_s, seconds / max(chunks * len(self.config.sizes), 1))

    def measure(self, policy: Policy, phase: str) -> tuple[list[dict], float]:
        """The rows of `policy` in `phase` and the seconds measuring them took, going on from the chunks that
        OUT/eval_progress.json keeps for this phase, these settings and these weights; `done` removes that file
        once the caller has kept the rows."""
        progress = Progress(self.progress_path, {"phase": phase, "settings": self.settings,
                                                 "weights": weights_digest(policy.module.state_dict())})
        if progress.chunks:
            print(f"evaluation {phase}: going on after {len(progress.chunks)} chunks measured earlier", flush=True)
        rows, seconds, replies = [], 0.0, []
        for size in self.config.sizes:
            measured, took, shown = evaluate_policy(policy, self.evaluator.at_size(size), size, self.sets,
                                                    self.rollout, self.config, phase, progress, self.deadline,
                                                    self.chunk_s)
            rows += [dataclasses.asdict(r) for r in measured]
            seconds += took
            replies += shown
        self._keep_replies(phase, replies)
        print(f"evaluation {phase}: {seconds:.0f} s", flush=True)
        self._took(seconds)
        return rows, seconds

    def _keep_replies(self, phase: str, replies: list[dict]) -> None:
        """OUT/eval_replies.json: each phase's replies (a later measurement of a phase replaces its entry)."""
        path, kept = self.out_dir / REPLIES_FILE, {}
        if path.is_file():
            try:
                kept = dict(json.loads(path.read_text()))
            except (ValueError, TypeError):  # the figures never depend on this file: a damaged one is replaced
                kept = {}
        kept[phase] = replies
        write_atomic(path, json.dumps(kept, indent=1))

    @property
    def progress_path(self) -> Path:
        return self.out_dir / PROGRESS_FILE

    def done(self) -> None:
        self.progress_path.unlink(missing_ok=True)

    def baseline(self, policy: Policy, warm_dir: Path | None) -> tuple[list[dict], float]:
        """The rows of the policy before RL, and the seconds they took to measure. A warm start's rows are kept
        beside its model (warm_dir/eval_before.json) and reused by every run from that model with the same
        settings, so the estimators of one comparison start from one measured baseline (and one evaluation's
        device time)."""
        cache = warm_dir / "eval_before.json" if warm_dir is not None else None
        if cache is not None and cache.is_file():
            try:
                kept = json.loads(cache.read_text())
                if kept["settings"] == json.loads(json.dumps(self.settings)):
                    print(f"evaluation before RL: reusing the warm start's ({cache})", flush=True)
                    self._took(kept["seconds"])
                    return kept["rows"], kept["seconds"]
            except (ValueError, KeyError, TypeError) as err:  # a damaged file is measured again, not trusted
                print(f"evaluation before RL: {cache} is unreadable ({err!r}); measuring again", flush=True)
        rows, seconds = self.measure(policy, "before RL" if warm_dir is None else "before RL (after SFT)")
        if cache is not None:
            write_atomic(cache, json.dumps({"settings": self.settings, "seconds": seconds, "rows": rows}))
        return rows, seconds

    def before_rl(self, policy: Policy, warm_dir: Path | None, resume: bool,
                  keep: bool = True) -> tuple[list[dict], float | None]:
        """The run's rows before RL, and the seconds they took (resumed: what its warm start's kept evaluation took,
        or None), kept in OUT/eval_before.json unless `keep` is False (a warm start alone: its rows stay beside its
        model)."""
        path = self.out_dir / "eval_before.json"
        if resume and path.is_file():  # a fresh run re-measures, or reuses its warm start's rows
            seconds = None
            try:
                seconds = float(json.loads((self.out_dir / "warmstart" / "eval_before.json").read_text())["seconds"])
                self._took(seconds)
            except (OSError, ValueError, KeyError, TypeError):  # no warm start, or its file damaged: no estimate
                pass
            return json.loads(path.read_text()), seconds
        rows, seconds = self.baseline(policy, warm_dir)
        if keep:
            write_atomic(path, json.dumps(rows))
        self.done()
        return rows, seconds

    def after_rl(self, policy: Policy, steps: int, rows_before: list[dict]) -> None:
        """The policy and its code figure after `steps` RL steps; OUT/eval_after.json, and the table of the rows
        before and after RL, then the code figures, in OUT/eval.md and on stdout."""
        phase = f"after {steps} steps"
        rows, _ = self.measure(policy, phase)
        self.code.measure(phase)
        table = format_table([EvalRow(**r) for r in rows_before + rows])
        if self.code.figures:
            table += f"\n\n{self.code.table()}"
        write_atomic(self.out_dir / "eval_after.json", json.dumps(rows))
        write_atomic(self.out_dir / "eval.md", table + "\n")
        self.done()
        print(table, flush=True)
