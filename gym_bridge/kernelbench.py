"""Benchmarking many candidates against a task set: KernelBench's layout, a results file that resumes, fast_p.

Candidates are files named `<problem stem>.py` or `<problem stem>__<variant>.py` (several variants per problem
allowed), each judged against the problem of the same stem in the task folder (a KernelBench level folder or any
folder of task files). KernelBench stems may end in "_" or hold "__" themselves (`36_RMSNorm_`,
`50_conv_standard_2D__square_input__square_kernel`), so a file belongs to the longest problem stem it equals or
starts with followed by "__" (`36_RMSNorm___variant.py` is a variant of `36_RMSNorm_`). Each result is appended
to a JSONL file as soon as it is known, so a bench that stops resumes where it stopped: a candidate already in the
file is not judged again (a line cut by the stop is dropped).

fast_p (KernelBench's score.py): the share of candidates that are correct and faster than the eager reference by
more than p; fast_0 is the share that is correct. The geometric mean speedup is over correct, timed candidates.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

from .result import EvalResult
from .tasks import Task, TaskError, TaskSet

FAST_P = (0.0, 1.0, 1.2, 2.0)
ROW_FIELDS = ("task", "candidate", "status", "reward", "speedup", "coverage", "correct", "kernel_ms", "ref_ms",
              "hacks", "reason", "timing_check")


@dataclass(frozen=True)
class Entry:
    """One candidate file and the problem it is judged against."""

    task: Task
    path: Path

    @property
    def id(self) -> str:
        return self.path.stem


def problem_of(stem: str, problems: Container[str]) -> str | None:
    """The problem a candidate file stem names: the longest of `problems` that `stem` equals or starts with followed
    by "__" (the variant's separator), or None. Longest, because a problem stem may itself contain "__" or end in
    "_": with problems `1_A` and `1_A__x`, `1_A__x__v2` is a variant of `1_A__x`, `1_A__y` one of `1_A`."""
    if stem in problems:
        return stem
    cuts = [i for i in range(len(stem) - 1) if stem.startswith("__", i)]  # overlapping: "___" cuts twice
    return next((stem[:i] for i in reversed(cuts) if stem[:i] in problems), None)


def pair_candidates(task_set: TaskSet, folder: str | Path, tasks: Iterable[Task] | None = None) -> list[Entry]:
    """Every candidate file of `folder` whose problem is in `tasks` (default: the whole set); a file that names no
    problem of the set is an error, so a typo cannot silently drop a candidate."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise TaskError(f"--candidates {root} is not a folder of <problem>.py / <problem>__<variant>.py files")
    wanted = {t.name for t in tasks} if tasks is not None else set(task_set.tasks)
    entries = []
    for path in sorted(root.glob("*.py")):
        stem = problem_of(path.stem, task_set.tasks)
        if stem is None:
            raise TaskError(f"candidate {path.name} names no problem of {task_set.root} (expected <problem>.py or "
                            f"<problem>__<variant>.py)")
        if stem in wanted:
            entries.append(Entry(task_set.tasks[stem], path))
    if not entries:
        raise TaskError(f"--candidates {root} holds no candidate for the chosen problems")
    return entries


def row(result: EvalResult, candidate: str) -> dict:
    data = result.to_dict()
    return {"task": result.task, "candidate": candidate, **{k: data[k] for k in ROW_FIELDS[2:]}}


def load_rows(path: str | Path) -> dict[str, dict]:
    """The rows a results file holds, by candidate (a torn last line is left out)."""
    rows: dict[str, dict] = {}
    path = Path(path)
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "candidate" in record:
            rows[record["candidate"]] = record
    return rows


def append_row(path: str | Path, record: dict) -> None:
    """One line, flushed to disk before the next candidate: what survives a kill is every finished result."""
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def summary(rows: Iterable[dict]) -> dict:
    rows = list(rows)
    n = len(rows)
    timed = [r for r in rows if r["correct"] and r["speedup"]]
    out = {"candidates": n, "problems": len({r["task"] for r in rows})}
    for p in FAST_P:
        hits = sum(1 for r in rows if r["correct"] and (p == 0.0 or (r["speedup"] or 0.0) > p))
        out[f"fast_{p:g}"] = hits / n if n else 0.0
    out["timed"] = len(timed)
    out["geomean_speedup"] = math.exp(sum(math.log(r["speedup"]) for r in timed) / len(timed)) if timed else None
    return out


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(rows: Iterable[dict]) -> str:
    lines = ["| problem | candidate | status | reward | speedup | coverage | kernel ms | ref ms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["task"], r["candidate"])):
        lines.append(f"| {r['task']} | {r['candidate']} | {r['status']} | {r['reward']:.3f} | "
                     f"{_fmt(r['speedup'], '.3f')} | {_fmt(r['coverage'], '.2f')} | {_fmt(r['kernel_ms'], '.4f')} | "
                     f"{_fmt(r['ref_ms'], '.4f')} |")
    return "\n".join(lines)


def summary_line(stats: dict) -> str:
    fast = ", ".join(f"fast_{p:g} {stats[f'fast_{p:g}']:.3f}" for p in FAST_P)
    geomean = _fmt(stats["geomean_speedup"], ".3f")
    return (f"{stats['candidates']} candidates on {stats['problems']} problems: {fast}; geometric mean speedup "
            f"{geomean} over {stats['timed']} correct timed candidates")
