"""Advantage estimators side by side: one warm start, then one `proxycomp rl` run per estimator at equal budget.

    python tools/compare_rl.py --config recipes/rl/h200_compare.yaml --ckpt RUN/checkpoints/last.ckpt \
        --out runs/rl_compare [--estimators trloo,grpo] [--parallel] [--sft_control] [-- --steps 4 ...]
    python tools/compare_rl.py --out runs/rl_compare --summarize_only   # re-read the runs, e.g. after a kill
    python tools/compare_rl.py --config ... --ckpt ... --out runs/rl_compare --resume [--max_time_s 540]

1. `proxycomp rl --warmstart_only` writes OUT/warmstart/model.ckpt once (corpus labelled by the gym, SFT);
2. each estimator's run starts from a copy of it (OUT/<estimator>/, its log in OUT/<estimator>.log), with the
   same config, seed and sampling, so the runs differ only in the estimator (and, with --parallel, in the
   timing noise of sharing one GPU: the two before-RL evaluations score the same samples and show it);
3. with --sft_control, after the RL runs, the control OUT/sft_only/: the warm start continued from its kept state
   (OUT/warmstart/state.ckpt: weights, optimizer, sampler) for as many supervised optimizer steps as the RL runs
   took (their fewest steps x algorithm.updates_per_step) and evaluated like an arm: what RL adds over more
   training on the kernel corpus. Its rows are the summary's `sft_only` "after" phase; its "before" is the warm
   start's. Asked for other steps later (a longer comparison), it is made again from the warm start (SFT steps are
   cheap beside RL's). Where state.ckpt is not (a machine the warm start was not made on), the whole warm start is
   made again for all the steps, which equals going on from it, from --ckpt, which must then be the model the warm
   start was made from (OUT/warmstart/base.json holds its weights' digest). A control killed during its evaluation
   (longer than one device call) goes on with its own model and kept chunks, whatever --ckpt is;
4. OUT/summary.md and summary.json hold, per run and evaluated set (e.g. the family's held-out split and the
   shipped tasks), correct@turn0, correct@any-turn, fast@1.2 at turn 0 and at the best turn, before and after RL,
   each with a 95% Wilson interval over the set's episodes (a split evaluated bucket by bucket also as a whole,
   "heldout (buckets pooled)"), the gym's verdict counts (hacks included), every
   difference that matters (each arm after vs before, the arms against each other after RL) as a mean over tasks
   with its 95% paired-bootstrap interval (the tasks resampled; "inside the noise" when it holds 0), per set and
   whole split, and the per-step training means; OUT/rl_curves.png plots the latter.
A run that fails leaves its log and makes the exit status non-zero; the others still finish and are summarised.
With --resume, a run with a checkpoint continues from it (`proxycomp rl --resume`), a finished run (evaluated after
the steps now asked for) is left alone, and a run killed before its first checkpoint starts again; so a comparison
longer than one device call is a chain of calls on a machine that keeps OUT; where every run left has its
checkpoint, no warm start is made, so a call on another machine needs only those runs' files (docs/rl.md).
--max_time_s ends the call in time instead of being killed mid-step: a run stops, checkpointed, before a step that
would leave no room for its after-RL evaluation, and is evaluated after the steps it took (--resume trains it on);
an evaluation longer than the time left (the RL runs' and the control's) stops between its chunks and goes on with
--resume in the next call.
In sequence, the first run gets an equal share of the time left and its steps set the others' (they are not cut by
the clock), so the runs keep an equal budget; in parallel each run is cut by the clock alone and the summary says
after how many steps each was evaluated.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from proxycomp.command import command_parser
from proxycomp.errors import UserError
from proxycomp.files import write_atomic

from .stats import paired_bootstrap, wilson

CONTROL = "sft_only"  # the run folder and summary name of the SFT-only control
CONTROL_FILE = "control.json"  # in OUT/sft_only/: the steps it was made with, written once it is evaluated
PLAN_FILE = "plan.json"  # in OUT/sft_only/: the steps it is being made with, written before its run starts
BASE_FILE = "base.json"  # in OUT/warmstart/: the digest of the --ckpt weights the warm start was made from

STEP_COLUMNS = ("reward/mean", "correct/any", "fast@1.2/best")
# Per-episode proportions of the held-out evaluation, each with a 95% Wilson score interval.
PROPORTIONS = ("correct/turn0", "correct/any", "fast@1.2/turn0", "fast@1.2/best")
MIN_EPISODES = 64  # fewer evaluation episodes per set and arm give intervals too wide to separate estimators


def base_digest(ckpt: Path) -> str:
    from proxycomp.checkpoint import model_weights, read_checkpoint, weights_digest

    return weights_digest(model_weights(read_checkpoint(ckpt)))


def rl_command(config: Path, ckpt: Path, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "proxycomp.cli", "rl", "--config", str(config), "--ckpt", str(ckpt),
            "--out", str(out), *extra]


def run_logged(command: list[str], log: Path, append: bool = False) -> subprocess.Popen:
    handle = log.open("a" if append else "w")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def read_run(run: Path) -> dict:
    """What one finished (or partly finished) run left: eval rows before/after and per-step metrics."""
    def rows(name: str) -> list[dict]:
        path = run / name
        return json.loads(path.read_text()) if path.is_file() else []

    steps = []
    if (run / "metrics.jsonl").is_file():
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"before": rows("eval_before.json"), "after": rows("eval_after.json"), "steps": steps}


def read_record(path: Path) -> dict | None:
    """One of this module's small records (control.json, plan.json, base.json); None when missing or unreadable,
    which counts as not written: a control is then made or evaluated again, left out of a summary, or refused a
    --ckpt it cannot check."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_control(out: Path, extra: int) -> dict:
    """The SFT-only control as a run: the warm start's rows before, its own rows (measured after its `extra` SFT
    steps) after; no RL steps."""
    def rows(path: Path) -> list[dict]:
        return json.loads(path.read_text())["rows"] if path.is_file() else []

    after = [{**row, "phase": f"after {extra} more SFT steps"}
             for row in rows(out / CONTROL / "warmstart" / "eval_before.json")]
    return {"before": rows(out / "warmstart" / "eval_before.json"), "after": after, "steps": []}


def steps_done(run: Path) -> int:
    steps = read_run(run)["steps"]
    return steps[-1]["step"] if steps else 0


def finished(run: Path, steps: int) -> bool:
    """Evaluated after `steps` RL steps (a run stopped by its time budget is evaluated too, but earlier)."""
    return (run / "eval_after.json").is_file() and steps_done(run) >= steps


def _interval(row: dict, metric: str) -> tuple[float, float, float]:
    """(proportion, low, high) of a metric over the row's episodes."""
    n, p = row["metrics"]["episodes"], row["metrics"][metric]
    return (p, *wilson(round(p * n), n))


def _whole(split: str) -> str | None:
    """The whole split of a set that is one bucket of it ("heldout:op" -> "heldout (buckets pooled)"), else None."""
    return f"{split.split(':', 1)[0]} (buckets pooled)" if ":" in split else None


def _pooled_rows(rows: list[dict]) -> list[dict]:
    """For each split evaluated bucket by bucket, an "all" row of the whole split from its buckets' "all" rows: the
    episodes and verdict counts added, the per-episode proportions weighted by episodes."""
    buckets: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if whole := _whole(row["split"]):
            buckets.setdefault((row["size"], whole), []).append(row)
    pooled = []
    for (size, split), parts in buckets.items():
        episodes = sum(part["metrics"]["episodes"] for part in parts)
        metrics = {"episodes": episodes, **{m: sum(part["metrics"][m] * part["metrics"]["episodes"] for part in parts)
                                            / episodes for m in PROPORTIONS}}
        for part in parts:
            for key, count in part["metrics"].items():
                if key.startswith(("verdict/", "hack/")):
                    metrics[key] = metrics.get(key, 0.0) + count
        pooled.append({"phase": parts[0]["phase"], "size": size, "split": split, "task": "all", "metrics": metrics})
    return pooled


def _set_rows(results: dict[str, dict]) -> list[tuple[str, str, dict]]:
    """(estimator, before/after, row) for every evaluated set's "all" row, each split evaluated bucket by bucket
    followed by its whole (`_pooled_rows`)."""
    set_rows = []
    for name, result in results.items():
        for when in ("before", "after"):
            rows = [row for row in result[when] if row["task"] == "all"]
            set_rows += [(name, when, row) for row in rows + _pooled_rows(rows)]
    return set_rows


def _per_task(results: dict[str, dict]) -> dict[tuple[str, str, str, str], dict[str, dict]]:
    """(estimator, before/after, size, set) -> {task: row} of the per-task rows. A split evaluated bucket by bucket
    ("heldout:op", "heldout:composition") is also one set as a whole, "heldout (buckets pooled)": the plan's power
    (docs/rl.md) is that of the whole split; each bucket alone has about half its tasks."""
    per_task: dict[tuple[str, str, str, str], dict[str, dict]] = {}
    for name, result in results.items():
        for when in ("before", "after"):
            for row in result[when]:
                if row["task"] != "all":
                    per_task.setdefault((name, when, row["size"], row["split"]), {})[row["task"]] = row
    for (name, when, size, split), rows in list(per_task.items()):
        if whole := _whole(split):
            per_task.setdefault((name, when, size, whole), {}).update(rows)
    return per_task


def _differences(results: dict[str, dict]) -> list[str]:
    """Each arm after RL against before, and the arms against each other after RL, per set and proportion: the mean
    of the per-task differences (weighted by episodes) with its 95% paired-bootstrap interval over tasks, "inside the
    noise" when the interval holds 0."""
    per_task = _per_task(results)
    names = list(results)
    pairs = [((n, "after"), (n, "before")) for n in names] + \
        [((a, "after"), (b, "after")) for i, a in enumerate(names) for b in names[i + 1:]]
    lines = []
    for size, split in dict.fromkeys((size, split) for _, _, size, split in per_task):
        for (a, a_when), (b, b_when) in pairs:
            first, second = per_task.get((a, a_when, size, split)), per_task.get((b, b_when, size, split))
            tasks = sorted(first.keys() & second.keys()) if first and second else []
            if not tasks:
                continue
            phases = first[tasks[0]]["phase"], second[tasks[0]]["phase"]
            weights = [first[t]["metrics"]["episodes"] for t in tasks]
            for metric in PROPORTIONS:
                diff, low, high = paired_bootstrap([first[t]["metrics"][metric] for t in tasks],
                                                   [second[t]["metrics"][metric] for t in tasks], weights)
                verdict = "inside the noise (the interval holds 0)" if low <= 0 <= high else "outside the noise"
                lines.append(f"- {split} ({size}) {metric}: {a} {phases[0]} vs {b} {phases[1]}, {len(tasks)} tasks: "
                             f"{diff:+.3f} [{low:+.3f}, {high:+.3f}], {verdict}")
    return lines


def summary_markdown(results: dict[str, dict]) -> str:
    set_rows = _set_rows(results)
    lines = ["Held-out evaluation: proportions of episodes with 95% Wilson score intervals.", "",
             "| estimator | phase | size | set | episodes | " + " | ".join(PROPORTIONS) + " |",
             "|" + "---|" * (5 + len(PROPORTIONS))]
    for name, _, row in set_rows:
        cells = [name, row["phase"], row["size"], row["split"], f"{row['metrics']['episodes']:.0f}",
                 *("{:.3f} [{:.3f}, {:.3f}]".format(*_interval(row, m)) for m in PROPORTIONS)]
        lines.append("| " + " | ".join(cells) + " |")
    few = sorted({f"{row['split']} ({name}, {row['phase']})" for name, _, row in set_rows
                  if row["metrics"]["episodes"] < MIN_EPISODES})
    if few:
        lines += ["", f"Fewer than {MIN_EPISODES} episodes (intervals too wide to separate arms): {', '.join(few)}."]
    verdicts = sorted({k for _, _, row in set_rows for k in row["metrics"] if k.startswith(("verdict/", "hack/"))})
    lines += ["", "The gym's verdicts over every evaluated turn (hack/<kind>: turns that tripped that check):", "",
              "| estimator | phase | size | set | " + " | ".join(verdicts) + " |", "|" + "---|" * (4 + len(verdicts))]
    for name, _, row in set_rows:
        counts = [f"{row['metrics'].get(k, 0):.0f}" for k in verdicts]
        lines.append("| " + " | ".join([name, row["phase"], row["size"], row["split"], *counts]) + " |")
    lines += ["", "Differences:", "", *(_differences(results) or ["- (no arm has been evaluated after RL yet)"])]
    lines += ["", "Training episodes, mean per step:", "",
              "| estimator | step | " + " | ".join(STEP_COLUMNS) + " | rollout s | turns with an advantage | "
              "group sizes |", "|" + "---|" * (5 + len(STEP_COLUMNS))]

    def number(row: dict, key: str, spec: str) -> str:  # null in metrics.jsonl where a figure was NaN
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    for name, result in results.items():
        for row in result["steps"]:
            cells = [name, str(row["step"]), *(number(row, c, ".3f") for c in STEP_COLUMNS),
                     number(row, "time/rollout_s", ".1f"), number(row, "advantage/nonzero_share", ".0%"),
                     f"{number(row, 'group_size/min', '.0f')}-{number(row, 'group_size/max', '.0f')}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(STEP_COLUMNS), figsize=(4 * len(STEP_COLUMNS), 3.2))
    for ax, column in zip(axes, STEP_COLUMNS):
        for name, result in results.items():
            ax.plot([r["step"] for r in result["steps"]], [r.get(column, float("nan")) for r in result["steps"]],
                    marker="o", label=name)
        ax.set_title(column)
        ax.set_xlabel("RL step")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = command_parser("proxycomp rl-compare", __doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="the rl config every run shares (recipes/rl/*.yaml)")
    parser.add_argument("--ckpt", type=Path, help="the initial policy: a .ckpt written by proxycomp (fit, rl)")
    parser.add_argument("--out", type=Path, required=True, help="the comparison's folder: warm start, runs, summary")
    parser.add_argument("--estimators", default="trloo,grpo", help="comma-separated advantage estimators, one run each")
    parser.add_argument("--parallel", action="store_true", help="run the estimators at the same time (one GPU shared)")
    parser.add_argument("--summarize_only", action="store_true", help="only write the summary of the runs in --out")
    parser.add_argument("--resume", action="store_true", help="continue the runs already in --out")
    parser.add_argument("--max_time_s", type=float,
                        help="wall seconds for this invocation, after-RL evaluations included (see above)")
    parser.add_argument("--sft_control", action="store_true",
                        help=f"after the RL runs, the SFT-only control OUT/{CONTROL}/ (see above)")
    args = parser.parse_args(argv)
    if args.max_time_s is not None and args.max_time_s <= 0:
        parser.error(f"--max_time_s: must be > 0, got {args.max_time_s:g}")
    from proxycomp.gym_bridge.rl.advantages import estimator_names

    estimators = [e.strip() for e in args.estimators.split(",") if e.strip()]
    unknown = [e for e in estimators if e not in estimator_names()]
    if unknown or not estimators:
        parser.error(f"--estimators: unknown {unknown or 'empty'}; choose from {', '.join(estimator_names())}")
    if args.summarize_only:
        return summarize(args.out, estimators)
    for flag, path in (("--config", args.config), ("--ckpt", args.ckpt)):
        if path is None or not path.is_file():
            parser.error(f"{flag}: no such file: {path}")
    from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config

    try:  # the steps this invocation asks for, and a config typo reported before any run starts
        config = parse_config(["--config", str(args.config), "--ckpt", str(args.ckpt), *extra])[0]
    except RLConfigError as err:
        parser.error(str(err))
    from proxycomp.gym_bridge.rl.warmstart import STATE_FILE

    target_steps = config.steps
    args.out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    warm = args.out / "warmstart"
    todo = [name for name in estimators if not (args.resume and finished(args.out / name, target_steps))]
    starting = [name for name in todo
                if not (args.resume and (args.out / name / "checkpoints" / "last.ckpt").is_file())]
    if not starting and (warm / "eval_before.json").is_file():
        # Every run left goes on from its own checkpoint: a call that carried only those (a machine without the
        # warm start's model, docs/rl.md) needs no warm start.
        print("warm start: not needed, every run left goes on from its own checkpoint", flush=True)
    elif not (warm / "model.ckpt").is_file():
        made = args.out / "warmstart_run" / "warmstart"
        if not (made / "model.ckpt").is_file():  # made from --ckpt now (a model made before, then killed, is reused)
            if (warm / "eval_before.json").is_file():
                # The warm start was made and measured, and its model is not on this machine. Another one made here
                # would differ (SFT on a GPU is not bit-reproducible) from the one the runs made so far started from.
                print(f"compare_rl: {', '.join(starting)} would start from the warm start measured in "
                      f"{warm / 'eval_before.json'}, whose model.ckpt is not here; bring it back to {warm} "
                      f"(docs/rl.md, the chain across sessions) or give --estimators only runs that have their "
                      f"checkpoint", file=sys.stderr)
                return 1
            try:
                base = {"ckpt": str(args.ckpt), "weights": base_digest(args.ckpt)}
            except UserError:
                base = None  # the warm start's run says what is wrong with --ckpt
            if base is not None:
                made.mkdir(parents=True, exist_ok=True)
                write_atomic(made / BASE_FILE, json.dumps(base))
        command = rl_command(args.config, args.ckpt, args.out / "warmstart_run", [*extra, "--warmstart_only"])
        if run_logged(command, args.out / "warmstart.log", append=args.resume).wait():  # an earlier call's log kept
            print(f"compare_rl: the warm start failed; see {args.out / 'warmstart.log'}", file=sys.stderr)
            return 1
        shutil.copytree(made, warm, ignore=shutil.ignore_patterns(STATE_FILE), dirs_exist_ok=True)
        if (made / STATE_FILE).is_file():  # its largest file (weights and AdamW moments): moved, not stored twice
            os.replace(made / STATE_FILE, warm / STATE_FILE)
    if (warm / "model.ckpt").is_file():
        print(f"warm start ready ({time.perf_counter() - start:.0f} s): {warm / 'model.ckpt'}", flush=True)

    runs, failed, steps_cap = {}, [], None
    for name in estimators:
        out = args.out / name
        if name not in todo:
            print(f"{name}: finished earlier, left alone", flush=True)
            continue
        if name in starting:
            shutil.copytree(warm, out / "warmstart", dirs_exist_ok=True, ignore=shutil.ignore_patterns(STATE_FILE))
        resume = name not in starting
        limit = []
        if steps_cap is not None:  # equal budget: as many steps as the first run took, whatever the clock says
            limit = ["--steps", str(steps_cap)]
        elif args.max_time_s is not None:  # in sequence, the first run takes its share and sets the steps
            share = 1 if args.parallel else len(todo) - todo.index(name)
            limit = ["--max_time_s", f"{max((start + args.max_time_s - time.perf_counter()) / share, 1.0):.0f}"]
        command = rl_command(args.config, args.ckpt, out,
                             [*extra, *limit, "--algorithm.estimator", name, *(["--resume"] if resume else [])])
        process = run_logged(command, args.out / f"{name}.log", append=args.resume)
        runs[name] = process
        if not args.parallel:
            if process.wait():
                failed.append(name)
            elif args.max_time_s is not None and steps_cap is None:
                steps_cap = steps_done(out) or None  # a run stopped before its first step sets nothing
    if args.parallel:
        failed = [name for name, process in runs.items() if process.wait()]
    if args.sft_control:
        evaluated = [steps_done(args.out / n) for n in estimators if (args.out / n / "eval_after.json").is_file()]
        deadline = None if args.max_time_s is None else start + args.max_time_s
        if not evaluated or not min(evaluated):
            print(f"{CONTROL}: no RL run has been evaluated after RL steps yet; nothing to match", flush=True)
        elif not run_control(args, extra, config, min(evaluated), deadline):
            failed.append(CONTROL)
    for name in failed:
        print(f"compare_rl: the {name} run failed; see {args.out / (name + '.log')}", file=sys.stderr)

    summarize(args.out, estimators)
    print(f"compare_rl: {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


def run_control(args, extra: list[str], config, rl_steps: int, deadline: float | None) -> bool:
    """The SFT-only control for `rl_steps` RL steps (the module docstring says what it is); False if its run failed.
    Left alone when made for these steps already; given the time left, its evaluation stops between chunks at the
    deadline and goes on in the next call."""
    from proxycomp.gym_bridge.rl.warmstart import STATE_FILE

    folder, warm = args.out / CONTROL, args.out / "warmstart"
    wanted = {"rl_steps": rl_steps, "sft_steps": rl_steps * config.algorithm.updates_per_step,
              "warmstart_steps": config.warmstart.steps}

    def made_for_these_steps(path: Path) -> bool:  # control.json once evaluated, plan.json from its start
        return read_record(path) == wanted

    if made_for_these_steps(folder / CONTROL_FILE):
        print(f"{CONTROL}: finished earlier, left alone", flush=True)
        return True
    limit = []
    if deadline is not None:
        if time.perf_counter() >= deadline:
            print(f"{CONTROL}: no time left (--max_time_s); --resume makes it", flush=True)
            return True
        limit = ["--max_time_s", f"{max(deadline - time.perf_counter(), 1.0):.0f}"]
    model, plan = folder / "warmstart" / "model.ckpt", folder / PLAN_FILE
    going_on = model.is_file() and made_for_these_steps(plan)
    if going_on:
        # Made for these steps and killed during its evaluation (an evaluation can outlast a device call): its run
        # reuses the model and the evaluation's kept chunks. Made again, it would differ (SFT on a GPU is not
        # bit-reproducible) and lose them.
        print(f"{CONTROL}: going on with the control made for {wanted['rl_steps']} RL steps ({model})", flush=True)
    elif not (warm / STATE_FILE).is_file():
        # Not carried to this machine (docs/rl.md): the control is the warm start made again for all its steps,
        # which equals going on from its state, and only from the model the warm start was made from.
        kept = read_record(warm / BASE_FILE)
        if kept is None or kept["weights"] != base_digest(args.ckpt):
            print(f"compare_rl: {warm / STATE_FILE} is not here, so {CONTROL} is made again from --ckpt, which must be "
                  f"the model the warm start was made from ({kept['ckpt'] if kept else 'not recorded'}); "
                  f"{args.ckpt} is not", file=sys.stderr)
            return False
        print(f"{CONTROL}: {warm / STATE_FILE} is not here; made again from --ckpt for all "
              f"{wanted['warmstart_steps'] + wanted['sft_steps']} steps", flush=True)
    if not going_on:  # made for other steps, or killed before its model was written: made again
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(warm, folder / "warmstart", ignore=shutil.ignore_patterns("model.ckpt", "eval_before.json"))
        write_atomic(plan, json.dumps(wanted))
    steps = wanted["warmstart_steps"] + wanted["sft_steps"]
    command = rl_command(args.config, args.ckpt, folder,
                         [*extra, *limit, "--warmstart_only", "--warmstart.steps", str(steps)])
    if run_logged(command, args.out / f"{CONTROL}.log", append=going_on).wait():
        return False
    if not (folder / "warmstart" / "eval_before.json").is_file():  # its evaluation stopped for time
        print(f"{CONTROL}: its evaluation goes on in the next call (--resume)", flush=True)
        return True
    write_atomic(folder / CONTROL_FILE, json.dumps(wanted))
    return True


def summarize(out: Path, estimators: list[str]) -> int:
    results = {name: read_run(out / name) for name in estimators}
    made = read_record(out / CONTROL / CONTROL_FILE)
    if made is not None:
        results[CONTROL] = read_control(out, made["sft_steps"])
    elif (out / CONTROL / CONTROL_FILE).exists():
        print(f"{CONTROL}: {out / CONTROL / CONTROL_FILE} is unreadable, so the control is left out of the summary "
              f"(a run with --sft_control writes it again)", flush=True)
    write_atomic(out / "summary.json", json.dumps(results, indent=1))
    table = summary_markdown(results)
    write_atomic(out / "summary.md", table + "\n")
    if any(r["steps"] for r in results.values()):
        plot_curves(results, out / "rl_curves.png")
    print(f"{table}\n\n{out / 'summary.md'}")
    return 0
