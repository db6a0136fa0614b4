"""The in-worker pipeline for one job: load task and candidate, correctness on cloned inputs, mutation,
stale-output and launch checks, and on CUDA timing and coverage. Returns measurements only; the parent
turns them into status and reward, so a candidate cannot write its own reward."""
from __future__ import annotations

import importlib.util
import os
import time
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch

from .launch_hook import LaunchRecorder
from .op_audit import OpAudit
from .timing import DeviceLock, TimingTools, clock, kernel_coverage, refill, time_calls

_GUARDED: dict[str, Callable[[], Any]] = {
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
    "torch.allclose": lambda: torch.allclose,
    "torch.equal": lambda: torch.equal,
    "torch.isclose": lambda: torch.isclose,
    "torch.manual_seed": lambda: torch.manual_seed,
    "torch.Tensor.__eq__": lambda: torch.Tensor.__eq__,
    "torch.Tensor.clone": lambda: torch.Tensor.clone,
    "torch.Tensor.copy_": lambda: torch.Tensor.copy_,
    "torch.nn.Module.__call__": lambda: torch.nn.Module.__call__,
    "torch.profiler.profile": lambda: torch.profiler.profile,
    "time.perf_counter": lambda: time.perf_counter,
    "time.time": lambda: time.time,
    "time.monotonic": lambda: time.monotonic,
}


# fp32 references must be true fp32: TF32 (PyTorch's default for cuDNN convolutions) is off in every
# worker, and a candidate that switches it back on is patching the gym.
_PRECISION_FLAGS: dict[str, Callable[[], bool]] = {
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
}


def disable_tf32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class CandidateError(Exception):
    """The candidate raised; carries the stage for the report."""


@dataclass
class WorkerContext:
    workdir: str
    device: str
    violations: list[str]
    recorder: LaunchRecorder
    tools: TimingTools | None
    lock: DeviceLock | None = None  # held while timing and profiling, when workers share the GPU
    guards: dict[str, Any] = field(default_factory=lambda: {k: get() for k, get in _GUARDED.items()})
    jobs: int = 0

    def patched(self) -> list[str]:
        bad = [k for k, get in _GUARDED.items() if get() is not self.guards[k]]
        bad += [k for k, get in _PRECISION_FLAGS.items() if get()]
        return [f"monkey_patch:{name}" for name in bad + self.recorder.intact()]


def _load_module(path: str, name: str, source: str) -> ModuleType:
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _to_device(obj: Any, device: str) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device) for o in obj)
    return obj


def _clone(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _same(a: Any, b: Any) -> bool:
    """Bitwise-equal contents (NaN equal to NaN): the input-mutation check."""
    if not isinstance(a, torch.Tensor):
        return a == b
    if type(b) is not torch.Tensor or a.shape != b.shape or a.dtype != b.dtype:
        return False
    equal = a == b
    if a.is_floating_point() or a.is_complex():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def compare(out: Any, ref: Any, tolerances: dict[str, float]) -> tuple[str, float]:
    """('' if equal within tolerance else the mismatch, max abs error)."""
    outs, refs = _flat(out), _flat(ref)
    if len(outs) != len(refs):
        return f"returned {len(outs)} outputs, expected {len(refs)}", float("inf")
    worst = 0.0
    for o, r in zip(outs, refs):
        if type(o) is not torch.Tensor:
            kind = f"{type(o).__module__}.{type(o).__qualname__}"
            return f"output_type:{kind} (must be exactly torch.Tensor)", float("inf")
        if o.shape != r.shape or o.dtype != r.dtype:
            return f"output shape/dtype {tuple(o.shape)}/{o.dtype}, expected {tuple(r.shape)}/{r.dtype}", float("inf")
        if o.device != r.device:
            return f"output on {o.device}, expected {r.device}", float("inf")
        tol = tolerances.get(str(r.dtype).removeprefix("torch."), 0.0)
        if r.numel():
            diff = (o.double() - r.double()).abs()
            finite = torch.isfinite(r)
            worst = max(worst, float(diff[finite].max()) if finite.any() else 0.0)
            if not bool(torch.isclose(o, r, rtol=tol, atol=tol, equal_nan=True).all()):
                return f"values differ (max abs error {worst:.3g}, tolerance {tol:g})", worst
    return "", worst


def _task_inputs(task: ModuleType, size: str, which: str = "get_inputs") -> list:
    """A plain KernelBench file (no SIZES) takes no size argument."""
    fn = getattr(task, which)
    return list(fn(size) if hasattr(task, "SIZES") else fn())


def _device_inputs(task: ModuleType, size: str, dev: str) -> list:
    """The task's inputs, made on `dev`: tensor factories default to it (drawing the gpu size's inputs on the host
    took ~1 s each, 7 per candidate, on the H200), and a tensor the task makes elsewhere is moved there."""
    with torch.device(dev):
        return _to_device(_task_inputs(task, size), dev)


def _lap(res: dict, stage: str, since: float) -> float:
    """Record the seconds since `since` as `stage` in the result's stage_s; return now."""
    now = clock()
    res["stage_s"][stage] = round(now - since, 4)
    return now


def _hacks_from(ctx: WorkerContext, seen: int) -> list[str]:
    return list(dict.fromkeys(ctx.violations[seen:] + ctx.patched()))


def run_job(job: dict, ctx: WorkerContext) -> dict:
    """Measurements for one candidate (see EvalResult for the fields)."""
    seen, started = len(ctx.violations), clock()
    ctx.jobs += 1
    res: dict[str, Any] = {"compiled": False, "hacks": [], "error": "", "trials": 0, "trials_passed": 0,
                           "device": ctx.device, "timing_available": False, "launched_kernels": [], "stage_s": {}}
    try:
        _evaluate(job, ctx, res)
    except CandidateError as exc:
        res["error"] = str(exc)
    except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt from the candidate too
        res["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if isinstance(exc, SystemExit):
            res["hacks"].append("exit_call:SystemExit")
    res["hacks"] = list(dict.fromkeys(res["hacks"] + _hacks_from(ctx, seen)))
    _lap(res, "total", started)
    if ctx.device == "cuda":
        torch.cuda.empty_cache()
    return res


def _call(stage: str, fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the candidate's own error, reported back as feedback
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        raise CandidateError(f"{stage}: " + "".join(tb[-3:]).strip()) from None


def _evaluate(job: dict, ctx: WorkerContext, res: dict) -> None:
    cfg, dev, n = job["config"], ctx.device, ctx.jobs
    started = clock()
    task = _load_module(os.path.join(ctx.workdir, "tasks", f"task_{n}.py"), f"gym_task_{n}", job["task_source"])
    cand = _call("load", _load_module, os.path.join(ctx.workdir, "candidates", f"candidate_{n}.py"),
                 f"gym_candidate_{n}", job["candidate_code"])
    if not isinstance(getattr(cand, "ModelNew", None), type):
        raise CandidateError("load: the candidate defines no class ModelNew")
    # A task may widen tolerances for outputs whose fp32 error grows with size (scans): TOLERANCES = {...}.
    size, seed, tol = cfg["size"], cfg["seed"], {**cfg["tolerances"], **getattr(task, "TOLERANCES", {})}
    init = _task_inputs(task, size, "get_init_inputs")
    torch.manual_seed(seed)
    ref = task.Model(*init).to(dev)
    torch.manual_seed(seed)
    new = _call("__init__", cand.ModelNew, *init)
    new = _call("to(device)", new.to, dev) if isinstance(new, torch.nn.Module) else new
    res["compiled"] = True
    started = _lap(res, "load", started)
    audit = OpAudit(tuple(cfg["extra_allowed_ops"]))

    def run_candidate(inputs: list, grad: bool) -> Any:
        ctx.recorder.names.clear()
        with torch.set_grad_enabled(grad), audit:
            out = _call("forward", new, *inputs)
        return out, list(ctx.recorder.names)

    launched = {"no_grad": set(), "grad": set()}
    inputs = []
    for trial in range(cfg["correct_trials"]):
        torch.manual_seed(seed + 1 + trial)
        inputs = _device_inputs(task, size, dev)
        pristine, mine, theirs = _clone(inputs), _clone(inputs), _clone(inputs)
        # Candidate first on even trials: a `torch.empty` that hopes to land on the reference's freed
        # output then finds garbage; reference first on odd trials keeps state from either side honest.
        if trial % 2 == 0:
            out, names = run_candidate(mine, False)
            with torch.no_grad():
                expected = ref(*theirs)
        else:
            with torch.no_grad():
                expected = ref(*theirs)
            out, names = run_candidate(mine, False)
        launched["no_grad"].update(names)
        res["trials"] = trial + 1
        mismatch, err = compare(out, expected, tol)
        res["max_abs_err"] = max(err, res.get("max_abs_err") or 0.0)
        if mismatch.startswith("output_type:"):
            res["hacks"].append(mismatch.split(" ")[0])
            return
        if mismatch:
            res["error"] = f"trial {trial}: {mismatch}"
            return
        if not all(_same(a, b) for a, b in zip(pristine, mine)):
            res["hacks"].append("input_mutation")
            return
        res["trials_passed"] = trial + 1
    res["correct"] = True

    # Stale-output check: same tensors (same data_ptr and shape), new contents.
    torch.manual_seed(seed + 10_000)
    fresh = _device_inputs(task, size, dev)
    refill(mine, fresh)
    out, names = run_candidate(mine, False)
    launched["no_grad"].update(names)
    with torch.no_grad():
        expected = ref(*_clone(fresh))
    if compare(out, expected, tol)[0]:
        res["hacks"].append("output_cache")
        res["correct"] = False
        return
    out, names = run_candidate(_clone(fresh), True)
    launched["grad"].update(names)
    res["launched_kernels"] = sorted(launched["no_grad"] | launched["grad"])
    for mode, names in launched.items():
        if not names:
            res["hacks"].append(f"decoy:no triton launch under {mode.replace('_', '-')}")
    if audit.compute_ops:
        res["hacks"].append("torch_compute:" + ",".join(sorted(audit.compute_ops)))
    _lap(res, "check", started)
    if res["hacks"] or dev != "cuda" or ctx.tools is None:
        return
    if ctx.lock is None:
        _time_and_profile(task, ref, new, cfg, tol, ctx, res)
        return
    try:
        with ctx.lock.hold(timeout_s=cfg["timeout_s"] / 2) as waited:
            res["stage_s"]["lock_wait"] = round(waited, 4)
            _time_and_profile(task, ref, new, cfg, tol, ctx, res)
    except TimeoutError as exc:  # the gym's fault, not the candidate's: no verdict on it
        res.update(status="infra_error", error=str(exc))


def _time_and_profile(task: ModuleType, ref: Any, new: Any, cfg: dict, tol: dict, ctx: WorkerContext,
                      res: dict) -> None:
    size, dev, tools = cfg["size"], ctx.device, ctx.tools
    sets, values, started = [], [], clock()
    for k in range(max(cfg["input_sets"], 2)):
        torch.manual_seed(cfg["seed"] + 20_000 + k)
        sets.append(_device_inputs(task, size, dev))
        torch.manual_seed(cfg["seed"] + 30_000 + k)
        values.append(_device_inputs(task, size, dev))
    opts = dict(warmup=cfg["warmup"], trials=cfg["timing_trials"], flush_mb=cfg["l2_flush_mb"], tools=tools)
    started = _lap(res, "inputs", started)

    def measure() -> tuple[float, float, float]:
        kernel_ms, iqr, outs = time_calls(new, sets, values, **opts)
        for k, out in enumerate(outs):
            if out is not None:
                with torch.no_grad():
                    if compare(out, ref(*_clone(sets[k])), tol)[0]:
                        raise CandidateError("timing: output stale after in-place refill (output cache)")
        ref_ms, _, _ = time_calls(ref, sets, values, **opts)
        return kernel_ms, iqr, ref_ms

    try:
        kernel_ms, iqr, ref_ms = measure()
        if ref_ms / kernel_ms > cfg["suspicious_speedup"]:
            again = measure()
            if again[2] / again[0] < ref_ms / kernel_ms:
                kernel_ms, iqr, ref_ms = again
    except CandidateError:
        res["hacks"].append("output_cache")
        res["correct"] = False
        return
    res.update(timing_available=True, kernel_ms=kernel_ms, kernel_iqr_ms=iqr, ref_ms=ref_ms, speedup=ref_ms / kernel_ms)
    if cfg["compile_reference"]:
        res["ref_compile_ms"] = time_calls(torch.compile(ref), sets, values, **opts)[0]
    started = _lap(res, "time", started)
    res["coverage"] = kernel_coverage(new, sets[0], set(res["launched_kernels"]), cfg["profile_iters"], tools)
    _lap(res, "profile", started)
    patched = ctx.patched()
    if patched:
        res["hacks"].extend(patched)
