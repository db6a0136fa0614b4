"""Our judge and KernelBench's own harness side by side, on the same candidates and the same problem files.

    python tools/kernelbench_side_by_side.py --kernelbench .kb/KernelBench --level 1 --problems 19,23 \
        --shape 19:batch_size=4096,dim=16411 --candidates tests/gym/kernelbench/side_by_side \
        --work /tmp/sbs --out sbs.json

1. Copies the chosen problems of KernelBench/level<N> into WORK/problems, with the module-level integer constants
   named by --shape rewritten (`NAME=VALUE,...` for every chosen problem that has NAME, `PROBLEM:NAME=VALUE,...` for
   one; PROBLEM is an id or a stem), and the candidates that name those problems (`<stem>.py`, `<stem>__<variant>.py`)
   into WORK/candidates. These copies are made here at run time and never committed.
2. Ours: `proxycomp gym bench --tasks WORK/problems --candidates WORK/candidates --size gpu --workers 1 --json`.
3. Theirs, one subprocess per candidate (their harness imports the candidate in its own process, so a crash or a
   hang costs that candidate only): kernelbench.eval.eval_kernel_against_ref(backend="triton", num_correct_trials=5,
   num_perf_trials=100, measure_performance=True, timing_method="cuda_event", fp32), then the eager reference timed by
   kernelbench.timing.measure_ref_program_time with the same trials, as their scripts/run_and_check.py does: their
   speedup is that reference mean over the kernel's mean.
4. A table (candidate | our status | their correctness | our speedup | their speedup | ours/theirs | the times), and
   --out: both sides' raw fields (our kernel_ms, ref_ms, timing_check; their runtime stats and metadata).

KernelBench's package __init__ imports its LLM helpers (kernelbench.utils: python-dotenv, openai, litellm, tqdm),
which eval and timing do not need: the package is entered here without its __init__, kernelbench.utils is imported
if it can be, and otherwise stood in for by the one function eval uses from it (get_gpu_vendor). eval.py needs
numpy, requests and pydantic. --cpu_check instead runs each candidate against its reference copy on the CPU under
TRITON_INTERPRET=1 (correctness only: use tiny --shape values).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

TAIL = 3000  # characters of a subprocess's log kept in --out


class Refusal(Exception):
    """Bad input or a missing prerequisite: one line, exit status 2."""


# ---------------------------------------------------------------- problems, shapes, candidates (no GPU needed)

def find_problems(level_dir: Path, wanted: list[str]) -> list[Path]:
    """The problem files named by id ("19") or stem ("19_ReLU", "19_ReLU.py"), in the order given."""
    files = sorted(level_dir.glob("*.py"))
    found = []
    for spec in wanted:
        spec = spec.removesuffix(".py")
        if spec.isdigit():
            match = [f for f in files if f.name.split("_")[0] == spec]
        else:
            match = [f for f in files if f.stem == spec]
        if len(match) != 1:
            raise Refusal(f"--problems {spec}: {'no' if not match else 'more than one'} problem file in {level_dir} "
                          f"(give an id such as 19 or a stem such as 19_ReLU)")
        found.append(match[0])
    return found


def parse_shapes(args: list[str]) -> dict[str | None, dict[str, int]]:
    """--shape values, `[PROBLEM:]NAME=INT,NAME=INT,...` each (PROBLEM, an id or a stem, applies to the whole value)
    -> {PROBLEM or None: {NAME: INT}}."""
    shapes: dict[str | None, dict[str, int]] = {}
    for arg in args:
        problem, colon, rest = arg.partition(":")
        if not colon or "=" in problem:
            problem, rest = "", arg
        for item in (part.strip() for part in rest.split(",")):
            name, sep, value = item.partition("=")
            try:
                number = int(value)
            except ValueError:
                number = None
            if not sep or not name.isidentifier() or number is None:
                raise Refusal(f"--shape {arg!r}: expected NAME=INTEGER,... or PROBLEM:NAME=INTEGER,... (e.g. "
                              f"batch_size=16,dim=4099 or 19:dim=4099)")
            shapes.setdefault(problem.strip() or None, {})[name] = number
    return shapes


def integer_constants(source: str) -> dict[str, ast.Constant]:
    """The module-level `NAME = <int literal>` assignments of a problem file, by name."""
    found = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            found[node.targets[0].id] = node.value
    return found


def rewrite_constants(source: str, values: dict[str, int]) -> tuple[str, dict[str, list[int]]]:
    """`source` with the module-level integer constants of `values` set to them; returns the text and
    {name: [old, new]}. Only those literals change: expressions built on them (bias_shape = (out_features,)) follow."""
    constants = integer_constants(source)
    missing = sorted(set(values) - set(constants))
    if missing:
        raise KeyError(", ".join(missing))
    lines = [line.encode() for line in source.splitlines(keepends=True)]  # ast's columns count UTF-8 bytes
    for name in sorted(values, key=lambda n: (constants[n].lineno, constants[n].col_offset), reverse=True):
        node = constants[name]
        line = lines[node.lineno - 1]
        lines[node.lineno - 1] = line[:node.col_offset] + str(values[name]).encode() + line[node.end_col_offset:]
    return b"".join(lines).decode(), {name: [constants[name].value, values[name]] for name in values}


def write_problem_copies(files: list[Path], shapes: dict[str | None, dict[str, int]], folder: Path) -> dict:
    """Each problem into `folder`, its constants rewritten; {stem: {source, copy, constants}}."""
    per_problem: dict[str, dict[str, int]] = {}
    for key, values in shapes.items():
        if key is None:
            continue
        match = [f for f in files if f.stem == key or f.name.split("_")[0] == key]
        if len(match) != 1:
            raise Refusal(f"--shape {key}:...: {key} is not one of the chosen problems "
                          f"({', '.join(f.stem for f in files)})")
        per_problem.setdefault(match[0].stem, {}).update(values)
    folder.mkdir(parents=True, exist_ok=True)
    records, used = {}, set()
    for path in files:
        source = path.read_text()
        constants = integer_constants(source)
        values = {n: v for n, v in shapes.get(None, {}).items() if n in constants}
        used |= set(values)
        values.update(per_problem.get(path.stem, {}))
        try:
            text, changed = rewrite_constants(source, values)
        except KeyError as err:
            raise Refusal(f"--shape: {path.name} has no module-level integer constant {err.args[0]} (it has: "
                          f"{', '.join(constants) or 'none'})") from None
        header = f"# {path.name} of KernelBench, constants rewritten for a side-by-side run: {changed or 'none'}\n"
        copy = folder / path.name
        copy.write_text(header + text)
        records[path.stem] = {"source": str(path), "copy": str(copy), "constants": changed}
    unused = sorted(set(shapes.get(None, {})) - used)
    if unused:
        raise Refusal(f"--shape {', '.join(unused)}: no chosen problem has such a module-level integer constant")
    return records


def copy_candidates(folder: Path, stems: list[str], dest: Path) -> tuple[dict[str, str], list[str]]:
    """The candidates of `folder` that name one of `stems`, copied into `dest`: ({candidate: problem}, skipped)."""
    from proxycomp.gym_bridge.kernelbench import problem_of  # here: KernelBench's worker process never imports ours

    if not folder.is_dir():
        raise Refusal(f"--candidates {folder} is not a folder")
    dest.mkdir(parents=True, exist_ok=True)
    chosen, skipped = {}, []
    for path in sorted(folder.glob("*.py")):
        stem = problem_of(path.stem, stems)
        if stem is None:
            skipped.append(path.name)
            continue
        shutil.copyfile(path, dest / path.name)
        chosen[path.stem] = stem
    if not chosen:
        raise Refusal(f"--candidates {folder} holds no <stem>.py or <stem>__<variant>.py for {', '.join(stems)}")
    return chosen, skipped


def need_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise Refusal("the comparison needs a CUDA GPU and this machine has none (torch.cuda.is_available() is "
                      "False): the problem and candidate copies are written; run it on a GPU machine, or use "
                      "--cpu_check for correctness under TRITON_INTERPRET=1")


# ---------------------------------------------------------------- the two sides

def run_ours(work: Path, timeout: float, extra: list[str]) -> dict:
    results = work / "ours.jsonl"
    results.unlink(missing_ok=True)  # a fresh judgement, not a resumed one
    cmd = [sys.executable, "-m", "proxycomp.cli", "gym", "bench", "--tasks", str(work / "problems"), "--candidates",
           str(work / "candidates"), "--size", "gpu", "--workers", "1", "--results", str(results), "--json", *extra]
    log = work / "logs" / "ours.log"
    started = time.monotonic()
    try:
        with open(log, "w") as fh:
            # cwd: the work folder, so that a checkout's proxycomp/ source folder cannot shadow the installed package
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=fh, timeout=timeout, cwd=work).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    rows = {}
    if results.is_file():
        for line in results.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            rows[record["candidate"]] = record
    return {"command": cmd, "rc": rc, "wall_s": round(time.monotonic() - started, 1), "rows": rows,
            "log_tail": log.read_text()[-TAIL:]}


def run_theirs(kernelbench: Path, problem: Path, candidate: Path, work: Path, timeout: float, trials: dict,
               interpret: bool = False) -> dict:
    """One candidate through KernelBench's harness (or the interpreter check) in a subprocess of this script."""
    out = work / "theirs" / f"{candidate.stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    request = work / "theirs" / f"{candidate.stem}.request.json"
    request.write_text(json.dumps({"kernelbench": str(kernelbench), "problem": str(problem),
                                   "candidate": str(candidate), "out": str(out), "interpret": interpret, **trials}))
    env = dict(os.environ, TRITON_INTERPRET="1") if interpret else dict(os.environ)
    log = work / "logs" / f"theirs_{candidate.stem}.log"
    started = time.monotonic()
    try:
        with open(log, "w") as fh:
            rc = subprocess.run([sys.executable, __file__, "--worker", str(request)], stdout=fh,
                                stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    record = json.loads(out.read_text()) if out.is_file() else {"status": f"no result (exit {rc})"}
    record.update(rc=rc, wall_s=round(time.monotonic() - started, 1))
    if rc != 0:
        record["log_tail"] = log.read_text()[-TAIL:]
    return record


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


def _gpu_vendor(device=None) -> str:
    """What kernelbench.eval asks of kernelbench.utils: the GPU's vendor (a ROCm build of torch means AMD)."""
    import torch

    if not torch.cuda.is_available():
        return "unknown"
    return "amd" if torch.version.hip else "nvidia"


def import_kernelbench(kernelbench: Path) -> tuple[types.ModuleType, types.ModuleType, str]:
    """kernelbench.eval and kernelbench.timing from the checkout's src/, without the package's __init__."""
    package = types.ModuleType("kernelbench")
    package.__path__ = [str(kernelbench / "src" / "kernelbench")]
    sys.modules["kernelbench"] = package
    try:
        importlib.import_module("kernelbench.utils")
        note = "kernelbench.utils imported"
    except ImportError as err:
        stand_in = types.ModuleType("kernelbench.utils")
        stand_in.get_gpu_vendor = _gpu_vendor
        sys.modules["kernelbench.utils"] = package.utils = stand_in
        note = f"kernelbench.utils stood in for (get_gpu_vendor only): {err}"
    return importlib.import_module("kernelbench.eval"), importlib.import_module("kernelbench.timing"), note


def their_verdict(request: dict) -> dict:
    """In the worker: KernelBench's verdict and times for one candidate, as their run_and_check.py gets them."""
    import torch

    kb_eval, kb_timing, note = import_kernelbench(Path(request["kernelbench"]))
    ref_src, cand_src = Path(request["problem"]).read_text(), Path(request["candidate"]).read_text()
    device = torch.device("cuda:0")
    result = kb_eval.eval_kernel_against_ref(
        ref_src, cand_src, seed_num=42, num_correct_trials=request["num_correct_trials"],
        num_perf_trials=request["num_perf_trials"], measure_performance=True, timing_method="cuda_event",
        verbose=False, device=device, backend="triton", precision=torch.float32)
    record = {"utils": note, "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
              "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    if result is None:  # their "lock file error, please retry"
        return {**record, "status": "no verdict (KernelBench asks for a retry)"}
    dump = result.model_dump() if hasattr(result, "model_dump") else result.dict()
    record.update(status="ok" if result.correctness else "compile error" if not result.compiled else "incorrect",
                  **_jsonable(dump))
    ref = kb_timing.measure_ref_program_time("reference", ref_src, num_trials=request["num_perf_trials"],
                                             timing_method="cuda_event", use_torch_compile=False, device=device,
                                             precision="fp32")
    record["ref_eager_stats"] = _jsonable(ref)
    if result.correctness and ref and result.runtime > 0:
        record["speedup"] = ref["mean"] / result.runtime
    return record


def interpret_verdict(request: dict) -> dict:
    """In the worker, under TRITON_INTERPRET=1: the candidate against its reference copy on the CPU, three seeds."""
    import torch

    def load(path: str, name: str) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    problem, candidate = load(request["problem"], "problem"), load(request["candidate"], "candidate")
    torch.manual_seed(0)
    init = problem.get_init_inputs()
    torch.manual_seed(1)
    model = problem.Model(*init)
    torch.manual_seed(1)
    model_new = candidate.ModelNew(*init)
    worst = 0.0
    with torch.no_grad():
        for seed in range(3):
            torch.manual_seed(100 + seed)
            inputs = problem.get_inputs()
            want, got = model(*inputs), model_new(*inputs)
            if want.shape != got.shape:
                return {"status": "incorrect", "error": f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"}
            ratio = (got - want).abs() / (1e-4 + 1e-4 * want.abs())  # allclose at KernelBench's fp32 1e-4
            worst = max(worst, float(ratio.max()) if bool(torch.isfinite(ratio).all()) else float("inf"))
    return {"status": "ok" if worst <= 1 else "incorrect", "worst_error_over_tolerance": worst,
            "shape": list(want.shape)}


def worker(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    record = interpret_verdict(request) if request["interpret"] else their_verdict(request)
    Path(request["out"]).write_text(json.dumps(record, indent=1))
    return 0


# ---------------------------------------------------------------- the table

def _num(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def compare(candidates: dict[str, str], ours: dict, theirs: dict) -> list[dict]:
    """One row per candidate: both verdicts, both speedups and their ratio, both sides' kernel and reference ms."""
    rows = []
    for name, problem in candidates.items():
        mine, their = ours["rows"].get(name, {}), theirs.get(name, {})
        our_speedup, their_speedup = mine.get("speedup"), their.get("speedup")
        their_kernel = their.get("runtime")  # -1.0 when they did not time it
        rows.append({"candidate": name, "problem": problem, "our_status": mine.get("status", "missing"),
                     "their_correctness": their.get("correctness", their.get("status")),
                     "our_speedup": our_speedup, "their_speedup": their_speedup,
                     "ratio": our_speedup / their_speedup if our_speedup and their_speedup else None,
                     "our_kernel_ms": mine.get("kernel_ms"),
                     "their_kernel_ms": their_kernel if their_kernel and their_kernel > 0 else None,
                     "our_ref_ms": mine.get("ref_ms"),
                     "their_ref_ms": (their.get("ref_eager_stats") or {}).get("mean")})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| candidate | our status | their correctness | our speedup | their speedup | ours/theirs | "
             "our kernel ms | their kernel ms | our ref ms | their ref ms |", "|---" * 10 + "|"]
    for r in rows:
        lines.append(f"| {r['candidate']} | {r['our_status']} | {r['their_correctness']} | {_num(r['our_speedup'])} "
                     f"| {_num(r['their_speedup'])} | {_num(r['ratio'])} | {_num(r['our_kernel_ms'], '.4f')} | "
                     f"{_num(r['their_kernel_ms'], '.4f')} | {_num(r['our_ref_ms'], '.4f')} | "
                     f"{_num(r['their_ref_ms'], '.4f')} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernelbench", type=Path, help="a KernelBench checkout (with KernelBench/ and src/kernelbench/)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problems", default="", help="comma-separated problem ids or file stems of the level")
    p.add_argument("--shape", action="append", default=[],
                   help="[PROBLEM:]NAME=INT,...: module-level integer constants to rewrite in the copies, in every "
                        "chosen problem that has them or in PROBLEM's (an id or a stem); repeatable")
    p.add_argument("--candidates", type=Path, help="a folder of <stem>.py / <stem>__<variant>.py files")
    p.add_argument("--work", type=Path, default=Path("kb_side_by_side"), help="folder for the copies and logs")
    p.add_argument("--out", type=Path, default=None, help="JSON file for everything (default: WORK/side_by_side.json)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate in KernelBench's harness")
    p.add_argument("--ours_timeout", type=float, default=900.0, help="seconds for our whole bench")
    p.add_argument("--ours_args", default="", help="extra arguments for `proxycomp gym bench`, space-separated")
    p.add_argument("--num_correct_trials", type=int, default=5)
    p.add_argument("--num_perf_trials", type=int, default=100)
    p.add_argument("--cpu_check", action="store_true",
                   help="only check each candidate against its copy on the CPU under TRITON_INTERPRET=1")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.worker:
        return worker(args.worker)
    try:
        return _run(args)
    except Refusal as err:
        print(f"kernelbench_side_by_side: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.kernelbench is None or args.candidates is None or not args.problems:
        raise Refusal("--kernelbench, --problems and --candidates are required")
    level_dir = args.kernelbench / "KernelBench" / f"level{args.level}"
    if not level_dir.is_dir() or not (args.kernelbench / "src" / "kernelbench" / "eval.py").is_file():
        raise Refusal(f"--kernelbench {args.kernelbench}: expected a KernelBench checkout with {level_dir} and "
                      f"src/kernelbench/eval.py")
    files = find_problems(level_dir, [p for p in args.problems.split(",") if p.strip()])
    work = args.work.resolve()
    for sub in ("problems", "candidates", "theirs", "logs"):
        shutil.rmtree(work / sub, ignore_errors=True)
    (work / "logs").mkdir(parents=True)
    problems = write_problem_copies(files, parse_shapes(args.shape), work / "problems")
    candidates, skipped = copy_candidates(args.candidates, list(problems), work / "candidates")
    print(f"{len(problems)} problem copies in {work / 'problems'}, {len(candidates)} candidates in "
          f"{work / 'candidates'}" + (f" (skipped, naming other problems: {', '.join(skipped)})" if skipped else ""))
    trials = {"num_correct_trials": args.num_correct_trials, "num_perf_trials": args.num_perf_trials}
    if args.cpu_check:
        checks = {c: run_theirs(args.kernelbench.resolve(), work / "problems" / f"{p}.py",
                                work / "candidates" / f"{c}.py", work, args.timeout, trials, interpret=True)
                  for c, p in candidates.items()}
        for name, check in checks.items():
            print(f"{name}: {check.get('status')}  worst error / tolerance "
                  f"{_num(check.get('worst_error_over_tolerance'), '.3g')}  {check.get('error', '')}")
        _write(args.out or work / "cpu_check.json", {"problems": problems, "checks": checks})
        return 0 if all(c.get("status") == "ok" for c in checks.values()) else 1
    need_gpu()
    ours = run_ours(work, args.ours_timeout, args.ours_args.split())
    print(f"ours: exit {ours['rc']} in {ours['wall_s']} s, {len(ours['rows'])} rows", flush=True)
    theirs = {}
    for name, problem in candidates.items():
        theirs[name] = run_theirs(args.kernelbench.resolve(), work / "problems" / f"{problem}.py",
                                  work / "candidates" / f"{name}.py", work, args.timeout, trials)
        print(f"theirs: {name}: {theirs[name].get('status')} in {theirs[name]['wall_s']} s", flush=True)
    rows = compare(candidates, ours, theirs)
    print(table(rows))
    _write(args.out or work / "side_by_side.json",
           {"level": args.level, "problems": problems, "candidates": candidates, "skipped": skipped,
            "trials": trials, "table": rows, "ours": ours, "theirs": theirs})
    return 0


def _write(path: Path, record: dict) -> None:
    Path(path).write_text(json.dumps(_jsonable(record), indent=1))
    print(f"written: {path}")


if __name__ == "__main__":
    sys.exit(main())
