"""`proxycomp gym tasks|eval|bench|generate`: list the tasks, judge one candidate, benchmark the shipped solutions,
write a generated task family."""
from __future__ import annotations

import datetime
import json
import os
import shlex
import time

from proxycomp.benchmarks import add_benchmarks_option, append_block
from proxycomp.cli import command_parser
from proxycomp.errors import UserError

from .config import SIZES, Candidate, EvalConfig
from .evaluator import Evaluator
from .pool import LocalPool
from .result import EvalResult, mean_stages
from .tasks import TaskError, list_tasks, load_task

BENCH_HEADING = "## Gym"
BENCHMARKS_PATH = "BENCHMARKS.md"  # --benchmarks' default


def _default_size() -> str:
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def _parser():
    p = command_parser("proxycomp gym", "The embedded KernelGYM: its tasks, judging one kernel, benchmarking.")
    sub = p.add_subcommands(dest="command")
    ev = command_parser("proxycomp gym eval", "Judge one candidate file against one task.")
    ev.add_argument("--task", required=True, help="a shipped task name or a KernelBench-format task .py file")
    ev.add_argument("--candidate", required=True, help="file holding ModelNew (or a model reply with code fences)")
    ev.add_argument("--size", choices=SIZES, default=None, help="problem size; null: gpu with CUDA, else cpu")
    ev.add_argument("--timeout", type=float, default=EvalConfig.timeout_s, help="wall timeout per candidate (s)")
    ev.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    sub.add_subcommand("eval", ev, help="judge one candidate file against one task")
    sub.add_subcommand("tasks", command_parser("proxycomp gym tasks", "The shipped tasks."), help="list the shipped tasks")
    b = command_parser("proxycomp gym bench", "Judge every shipped solution and report the gym's own speed.")
    b.add_argument("--size", choices=SIZES, default=None, help="problem size; null: gpu with CUDA, else cpu")
    b.add_argument("--tasks", default="", help="comma-separated task names; empty: all with a solution")
    b.add_argument("--workers", type=int | None, default=None,
                   help="worker processes; null: one per GPU, else 1 (more than the GPUs share them, timing in turns)")
    b.add_argument("--json", dest="json_path", default=None, help="write the results to this JSON file")
    b.add_argument("--record", action="store_true", help="append a dated block to BENCHMARKS.md")
    add_benchmarks_option(b, BENCHMARKS_PATH)
    sub.add_subcommand("bench", b, help="judge every shipped solution")
    g = command_parser("proxycomp gym generate", "Write a task family: tasks with a held-out split, solutions, "
                       "broken variants (gym_bridge/task_family.py).")
    g.add_argument("--out", required=True, help="folder to write: tasks/ (a task set with splits.json), solutions/, "
                   "broken/, corpus/ (train tasks with their solutions, for pretraining), family.json")
    g.add_argument("--n", type=int, default=4000, help="number of tasks, both splits")
    g.add_argument("--seed", type=int, default=0, help="the family (and its held-out ops) is a function of the seed")
    g.add_argument("--heldout_fraction", type=float, default=0.1, help="share of the tasks in the held-out split")
    sub.add_subcommand("generate", g, help="write a generated task family with a held-out split")
    return p


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _verdict(r: EvalResult) -> str:
    return "\n".join([f"{r.task} [{r.id}]: {r.status}  reward {r.reward:.3f}  device {r.device or 'n/a'}",
                      r.feedback()])


def _cmd_eval(args) -> int:
    if not os.path.isfile(args.candidate):
        raise UserError(f"--candidate {args.candidate!r} is not a file")
    with open(args.candidate) as fh:
        code = fh.read()
    config = EvalConfig(size=args.size or _default_size(), timeout_s=args.timeout)
    with Evaluator(LocalPool(num_workers=1), config) as ev:
        (result,) = ev.submit([Candidate(task=args.task, code=code, id=os.path.basename(args.candidate))])
    print(json.dumps(result.to_dict(), indent=2) if args.json else _verdict(result))
    return 0 if result.status == "ok" else 1


def _cmd_tasks() -> int:
    print(f"{'task':24} {'category':14} {'sizes':26} solution")
    for t in list_tasks():
        print(f"{t.name:24} {t.category:14} {','.join(t.sizes):26} {'yes' if t.solution_path else 'no'}")
    return 0


def bench_table(results: list[EvalResult]) -> str:
    rows = ["| task | status | correct | speedup | coverage | kernel ms | ref ms |", "|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.task} | {r.status} | {r.correct} | {_fmt(r.speedup, '.3f')} | {_fmt(r.coverage, '.2f')} "
                    f"| {_fmt(r.kernel_ms, '.4f')} | {_fmt(r.ref_ms, '.4f')} |")
    return "\n".join(rows)


def _cmd_bench(args, argv: list[str]) -> int:
    size = args.size or _default_size()
    try:
        tasks = [load_task(n) for n in args.tasks.split(",") if n] if args.tasks else \
            [t for t in list_tasks() if t.solution_path]
    except TaskError as err:
        raise UserError(f"--tasks: {err}") from None
    missing = [t.name for t in tasks if not t.solution_path]
    if missing:
        raise UserError(f"--tasks: no shipped solution for {', '.join(missing)}")
    batch = [Candidate(task=t.name, code=t.solution_path.read_text(), id=t.name) for t in tasks]
    started = time.monotonic()
    with Evaluator(LocalPool(num_workers=args.workers), EvalConfig(size=size)) as ev:
        results = ev.submit(batch)
    wall = time.monotonic() - started
    table = bench_table(results)
    n_ok = sum(r.correct for r in results)
    summary = (f"{n_ok}/{len(results)} correct; wall {wall:.1f} s for {len(results)} candidates: "
               f"{wall / len(results):.2f} s per candidate, {60 * len(results) / wall:.1f} candidates/min; "
               f"worker seconds per candidate: {stage_means(results)}")
    print(table)
    print(summary)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"size": size, "wall_s": wall, "results": [r.to_dict() for r in results]}, fh, indent=2)
    if args.record:
        _record(args.benchmarks, size, argv, table, summary, results)
    return 0 if n_ok == len(results) else 1


def stage_means(results: list[EvalResult]) -> str:
    means = mean_stages(r.stage_s for r in results)
    return ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in means.items()) or "n/a"


def _record(path: os.PathLike, size: str, argv: list[str], table: str, summary: str, results: list[EvalResult]) -> None:
    import torch
    import triton

    device = next((r.device for r in results if r.device), "n/a")
    if device == "cuda":
        device = torch.cuda.get_device_name(0)
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    title = f"gym bench {datetime.date.today().isoformat()} ({device}, {versions}, size {size})"
    block = f"\n### {title}\n\n`proxycomp gym {shlex.join(argv)}`\n\n{table}\n\n{summary}\n"
    append_block(path, BENCH_HEADING, block)



def _cmd_generate(args) -> int:
    from .task_family import generate_family, write_family

    started = time.monotonic()
    try:
        family = generate_family(args.n, args.seed, args.heldout_fraction)
        folders = write_family(family, args.out)
    except (ValueError, FileExistsError) as err:
        raise UserError(str(err)) from None
    counts = {name: len(family.split(name)) for name in ("train", "heldout")}
    print(f"{counts['train']} train and {counts['heldout']} held-out tasks (held-out ops: "
          f"{', '.join(family.heldout_ops)}) in {folders['tasks']}, solutions in {folders['solutions']}, broken "
          f"variants in {folders['broken']} ({time.monotonic() - started:.0f} s)")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    options = args[args.command]
    if args.command == "eval":
        return _cmd_eval(options)
    if args.command == "tasks":
        return _cmd_tasks()
    if args.command == "generate":
        return _cmd_generate(options)
    return _cmd_bench(options, argv)
