"""`proxycomp gym tasks|eval|bench|generate`: list the tasks, judge one candidate, benchmark the shipped solutions,
write a generated task family."""
from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
import time

from proxycomp.bench.record import add_benchmarks_option, append_block
from proxycomp.command import command_parser
from proxycomp.defaults import default_device
from proxycomp.errors import UserError

from .kernelbench import Entry, append_row, load_rows, pair_candidates, row, summary, summary_line, table
from .config import SIZES, Candidate, EvalConfig
from .evaluator import Evaluator
from .pool import LocalPool
from .result import EvalResult, mean_stages
from .tasks import TaskError, list_tasks, load_task, load_task_set

BENCH_HEADING = "## Gym"
BENCHMARKS_PATH = "BENCHMARKS.md"  # --benchmarks' default
COMMANDS = ("tasks", "eval", "bench", "generate")  # an error names the one given: `proxycomp gym eval: error: ...`


def _default_size() -> str:
    return "gpu" if default_device() == "cuda" else "cpu"


def _judging_options(p) -> None:
    """How candidates are judged: the same flags for `eval` and `bench`."""
    p.add_argument("--size", choices=SIZES, default=None,
                   help="problem size: a key of the task's SIZES; a plain KernelBench file (no SIZES) has only the "
                        "shapes of its get_inputs(), judged with cpu or gpu; gpu sizes need CUDA (or --ray); null: "
                        "gpu with CUDA, else cpu")
    p.add_argument("--atol", type=float | None, default=None, help="absolute tolerance; null: per dtype (fp32 1e-4)")
    p.add_argument("--rtol", type=float | None, default=None, help="relative tolerance; null: per dtype (fp32 1e-4)")
    p.add_argument("--kernelbench_tolerance", action="store_true",
                   help="atol = rtol = 1e-2, as KernelBench v0 and KernelGYM compare")
    p.add_argument("--seed", type=int | None, default=None,
                   help="fixed seeds for every input (repeatable, and no defence against precomputed answers); "
                        "null: secret seeds drawn per evaluation")
    p.add_argument("--trials", type=int, default=EvalConfig.correct_trials, help="correctness trials")
    p.add_argument("--timing_trials", type=int, default=EvalConfig.timing_trials, help="timed calls (GPU)")
    p.add_argument("--timeout", type=float, default=EvalConfig.timeout_s, help="wall timeout per candidate (s)")
    p.add_argument("--strict", action="store_true", help="any torch compute in ModelNew is a hacking verdict")


PLAIN_SIZES = ("cpu", "gpu")  # either names a plain KernelBench file's own shapes (its get_inputs() takes no size)


def _check_size(size: str, tasks: list, local: bool) -> None:
    """Refuse a size a task cannot give (one line naming the file), and a GPU size judged here without CUDA."""
    for t in tasks:
        if size in (t.sizes or PLAIN_SIZES):
            continue
        if not t.sizes:
            raise UserError(f"--size {size}: {t.path} is a plain KernelBench file (no SIZES): it has only the shapes "
                            f"of its get_inputs(), which --size cpu or gpu judge; use one of those, or add SIZES "
                            f"with a {size!r} entry")
        raise UserError(f"--size {size}: {t.path} has SIZES {', '.join(t.sizes)} only; use one of those, or add "
                        f"a {size!r} entry to its SIZES")
    if local and size != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"--size {size} is judged on a GPU and this machine has no CUDA "
                            f"(torch.cuda.is_available() is False): use --size cpu, or leave --size out")


def _config(args, tasks: list) -> EvalConfig:
    size = args.size or _default_size()
    _check_size(size, tasks, local=getattr(args, "ray", None) is None)
    atol, rtol = (1e-2, 1e-2) if args.kernelbench_tolerance else (args.atol, args.rtol)
    return EvalConfig(size=size, atol=atol, rtol=rtol, seed=args.seed, correct_trials=args.trials,
                      timing_trials=args.timing_trials, timeout_s=args.timeout, strict=args.strict)


def _parser():
    p = command_parser("proxycomp gym", "The embedded KernelGYM: its tasks, judging one kernel, benchmarking.")
    sub = p.add_subcommands(dest="command")
    ev = command_parser("proxycomp gym eval", "Judge one candidate file against one task. Exit status: 0 when the "
                        "verdict is ok, 1 for any other verdict (incorrect, error, no_code, a hack...), 2 for bad "
                        "input.")
    ev.add_argument("--task", required=True, help="a shipped task name or a KernelBench-format task .py file")
    ev.add_argument("--candidate", required=True, help="file holding ModelNew (or a model reply with code fences)")
    _judging_options(ev)
    ev.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    sub.add_subcommand("eval", ev, help="judge one candidate file against one task")
    sub.add_subcommand("tasks", command_parser("proxycomp gym tasks", "The shipped tasks."),
                       help="list the shipped tasks")
    b = command_parser("proxycomp gym bench", "Judge many candidates: the shipped solutions, or a folder of candidates "
                                              "against a folder of KernelBench-format problems, with fast_p. Exit "
                                              "status: 0 when every candidate is correct, 1 when any is not, 2 for "
                                              "bad input.")
    b.add_argument("--tasks", default="",
                   help="a folder of task files (a KernelBench level folder), or comma-separated shipped task names; "
                        "empty: every shipped task with a solution")
    b.add_argument("--candidates", default=None,
                   help="a folder of <problem>.py / <problem>__<variant>.py files (needs --tasks FOLDER); null: the "
                        "shipped solutions")
    b.add_argument("--split", default="all", help="the split of the task folder's splits.json to judge")
    _judging_options(b)
    b.add_argument("--workers", type=int | None, default=None,
                   help="judge processes (Ray actors with --ray); null: one per GPU, else 1 (more than the GPUs share "
                        "them, timing in turns)")
    b.add_argument("--ray", default=None, help="judge on a Ray cluster: auto (the one this machine is in), "
                                               "ray://HOST:10001, or local (start one here); null: this machine")
    b.add_argument("--results", default=None, help="a JSONL file each result is appended to; candidates already "
                                                   "in it are not judged again (resume)")
    b.add_argument("--json", action="store_true", help="print the rows (task, candidate, status, reward, speedup, "
                                                       "coverage, ...) as a JSON list")
    b.add_argument("--record", action="store_true", help="append a dated block to BENCHMARKS.md")
    add_benchmarks_option(b, BENCHMARKS_PATH)
    sub.add_subcommand("bench", b, help="judge many candidates, report fast_p")
    g = command_parser("proxycomp gym generate", "Write a task family: tasks with a held-out split, solutions, "
                       "broken variants (gym_bridge/family/).")
    g.add_argument("--out", required=True, help="folder to write: tasks/ (a task set with splits.json), solutions/, "
                   "broken/, corpus/ (train tasks with their solutions, for pretraining), family.json")
    g.add_argument("--n", type=int, default=4000, help="number of tasks, both splits")
    g.add_argument("--seed", type=int, default=0, help="the family (and its held-out ops) is a function of the seed")
    g.add_argument("--heldout_fraction", type=float, default=0.1, help="share of the tasks in the held-out split")
    sub.add_subcommand("generate", g, help="write a generated task family with a held-out split")
    return p


def _verdict(r: EvalResult) -> str:
    return "\n".join([f"{r.task} [{r.id}]: {r.status}  reward {r.reward:.3f}  device {r.device or 'n/a'}",
                      r.feedback()])


def _cmd_eval(args) -> int:
    if not os.path.isfile(args.candidate):
        raise UserError(f"--candidate {args.candidate!r} is not a file")
    with open(args.candidate) as fh:
        code = fh.read()
    config = _config(args, [load_task(args.task)])
    with Evaluator(LocalPool(num_workers=1), config) as ev:
        (result,) = ev.submit([Candidate(task=args.task, code=code, id=os.path.basename(args.candidate))])
    print(json.dumps(result.to_dict(), indent=2) if args.json else _verdict(result))
    return 0 if result.status == "ok" else 1


def _cmd_tasks() -> int:
    print(f"{'task':24} {'category':14} {'sizes':26} solution")
    for t in list_tasks():
        print(f"{t.name:24} {t.category:14} {','.join(t.sizes):26} {'yes' if t.solution_path else 'no'}")
    return 0


def _bench_entries(args) -> list[Entry]:
    """The candidates to judge: the shipped solutions of --tasks (names), or --candidates against --tasks FOLDER."""
    if args.candidates is not None:
        if not args.tasks or not os.path.isdir(args.tasks):
            raise UserError("--candidates needs --tasks FOLDER: the problems the candidates are named after")
        task_set = load_task_set(args.tasks)
        return pair_candidates(task_set, args.candidates, task_set.split(args.split))
    if args.tasks and os.path.isdir(args.tasks):
        raise UserError("--tasks FOLDER needs --candidates FOLDER: shipped solutions exist for shipped tasks only")
    try:
        tasks = [load_task(n) for n in args.tasks.split(",") if n] if args.tasks else \
            [t for t in list_tasks() if t.solution_path]
    except TaskError as err:
        raise UserError(f"--tasks: {err}") from None
    missing = [t.name for t in tasks if not t.solution_path]
    if missing:
        raise UserError(f"--tasks: no shipped solution for {', '.join(missing)}")
    return [Entry(t, t.solution_path) for t in tasks]


def _cmd_bench(args, argv: list[str]) -> int:
    entries = _bench_entries(args)
    config = _config(args, [e.task for e in entries])
    done = load_rows(args.results) if args.results else {}
    todo = [e for e in entries if e.id not in done]
    rows = [done[e.id] for e in entries if e.id in done]
    if done:
        print(f"resuming: {len(rows)} of {len(entries)} candidates already in {args.results}", file=sys.stderr,
              flush=True)
    by_id = {e.id: e for e in todo}

    finished_at: list[float] = []

    def finished(result: EvalResult) -> None:
        finished_at.append(time.monotonic())
        record = row(result, result.id)
        rows.append(record)
        if args.results:
            append_row(args.results, record)
        print(f"[{len(rows)}/{len(entries)}] {result.id}: {result.status}  reward {result.reward:.3f}"
              + (f"  speedup {result.speedup:.3f}" if result.speedup else ""), file=sys.stderr, flush=True)

    started = time.monotonic()
    results = []
    if todo:
        with Evaluator.open(config, args.workers, args.ray) as ev:
            workers = getattr(ev.pool, "num_workers", 1)
            results = ev.submit([Candidate(task=str(e.task.path), code=e.path.read_text(), id=e.id)
                                 for e in by_id.values()], on_result=finished)
    wall = time.monotonic() - started
    stats = summary(rows)
    text = table(rows)
    line = summary_line(stats)
    if results:
        line += (f"; wall {wall:.1f} s for {len(results)} candidates: {wall / len(results):.2f} s per candidate, "
                 f"{60 * len(results) / wall:.1f} candidates/min{steady_rate(started, finished_at, workers)}; "
                 f"judge seconds per candidate: {stage_means(results)}")
    print(json.dumps(rows, indent=1) if args.json else f"{text}\n{line}")
    if args.json:
        print(line, file=sys.stderr)
    if args.record:
        _record(args.benchmarks, config.size, argv, text, line, results)
    return 0 if all(r["correct"] for r in rows) else 1


def steady_rate(started: float, finished_at: list[float], workers: int) -> str:
    """The first result's delay (the pool's start: the fork server's imports, each judge's device and Triton, the
    first candidate process) and the rate once every worker has finished its first candidate: what a long-lived
    pool, as RL keeps one, sustains."""
    if len(finished_at) <= 2 * workers:
        return ""
    span = finished_at[-1] - finished_at[workers - 1]
    steady = f"{60 * (len(finished_at) - workers) / span:.1f}/min after each worker's first, " if span > 0 else ""
    return f" ({steady}first result after {finished_at[0] - started:.1f} s)"


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
    from .family.files import write_family
    from .family.generate import generate_family

    started = time.monotonic()
    family = generate_family(args.n, args.seed, args.heldout_fraction)
    folders = write_family(family, args.out)
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


if __name__ == "__main__":  # `python -m proxycomp.gym_bridge.cli`: the `proxycomp gym` verb, errors included
    from proxycomp.command import run_command
    from proxycomp.gym_bridge.cli import main as gym  # by name, as `proxycomp gym` loads it (not as __main__)

    sys.exit(run_command("gym", gym, sys.argv[1:], COMMANDS))
