"""The candidate process: the only place a candidate's code runs, and nothing here decides anything.

Forked from the pool's zygote (which never touched CUDA) for one candidate, held by the OS (containment.py) and then
discarded. While it is still clean it sets up its instruments: the device, Triton's launch recorder, the op audit
(a dispatch mode) and the audit hook. Then it loads the candidate and answers the judge's requests (wire.py):

    stage     the task (its source: references are not secret, inputs are) and the timing inputs, drawn on the
              device from seeds the judge sends (GPU only)
    trial     one timed call on inputs refilled from a seed revealed only now (timing.timed_trial); "null" times a
              no-op: the judge's calibration, asked for before the candidate's code exists here
    load      the candidate's module, and ModelNew built under the judge's initialization seed
    call      one forward on the inputs sent: the outputs, their types, the Triton launches, the aten ops that the
              dispatch audit and the profiler saw, whether the inputs changed
    profile   start, or stop the profiler around timed trials; stop returns the kernels and ops it saw and the last
              output of each input set

Every answer is a claim. The judge compares outputs with its own reference, times each request on its own clock,
and checks what it cannot observe against what it can (judge.py).
"""
from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from . import wire
from .launch_hook import LaunchRecorder
from .op_audit import OpAudit
from .timing import draw_inputs, timed_trial

ERROR_CHARS = 4000  # of a traceback, its end
NAMES_KEPT = 200  # kernel and op names reported per profile

# Objects this process measures with, saved before the candidate loads; one that changes is reported as a patch.
GUARDED: dict[str, Callable[[], Any]] = {
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch.manual_seed": lambda: torch.manual_seed,
    "torch.Tensor.copy_": lambda: torch.Tensor.copy_,
    "torch.Tensor.clone": lambda: torch.Tensor.clone,
    "torch.nn.Module.__call__": lambda: torch.nn.Module.__call__,
    "torch.profiler.profile": lambda: torch.profiler.profile,
    "time.perf_counter": lambda: time.perf_counter,
    "time.monotonic": lambda: time.monotonic,
}
PRECISION_FLAGS: dict[str, Callable[[], bool]] = {  # fp32 is compared at fp32 tolerance: TF32 would be a downcast
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
}


class Session:
    """What one candidate process holds: its device, instruments, the loaded model and the timing buffers."""

    def __init__(self, workdir: str, device: str, flush_mb: int, extra_allowed_ops: tuple[str, ...],
                 violations: list[str]) -> None:
        self.workdir, self.device = workdir, device
        self.recorder = LaunchRecorder().install()
        self.extra_allowed_ops = extra_allowed_ops
        self.violations = violations
        self.model: Any = None
        self.task: Any = None
        self.size = ""
        self.sets: list[list] = []  # timing inputs, refilled in place before every trial
        self.last: dict[int, Any] = {}  # input set -> its last output
        self.profiler: Any = None
        self.previous: list = []  # the inputs of the last call, refilled in place by a "refill" call
        self.guards = {name: get() for name, get in GUARDED.items()}
        self.default_dtype, self.environ = torch.get_default_dtype(), dict(os.environ)
        self.flush = torch.empty(flush_mb << 18, dtype=torch.int32, device=device) if device == "cuda" and flush_mb \
            else None
        # Saved before the candidate exists: the trial loop uses these objects only.
        self.event = torch.cuda.Event if device == "cuda" else None
        self.synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)


def patched(session: Session) -> list[str]:
    """Process-wide state the candidate changed: the measuring objects it replaced, the TF32 switches it turned on,
    the launch paths it rewrote, a dispatch or function mode it left active, the default dtype, the environment."""
    bad = [name for name, get in GUARDED.items() if get() is not session.guards[name]]
    bad += [name for name, get in PRECISION_FLAGS.items() if get()]
    if torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack():
        bad.append("a torch mode left active")
    if torch.get_default_dtype() != session.default_dtype:
        bad.append("torch.set_default_dtype")
    if dict(os.environ) != session.environ:
        bad.append("os.environ")
    return [f"monkey_patch:{name}" for name in bad + session.recorder.intact()]


def _error(stage: str, exc: BaseException) -> dict:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:]).strip()
    reply = {"error": f"{stage}: {text[-ERROR_CHARS:]}"}
    if isinstance(exc, SystemExit):
        reply["exit_call"] = True
    return reply


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _profile(activities_cuda: bool):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if activities_cuda else [])
    return profile(activities=activities)


def _summarize(prof, launched: list[str]) -> dict:
    """Kernel names with their device microseconds, aten op names with their counts, the Triton launches."""
    kernels: Counter = Counter()
    ops: Counter = Counter()
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).endswith("CUDA"):
            kernels[evt.name] += evt.time_range.elapsed_us()
        elif evt.name.startswith("aten::"):
            ops[evt.name.removeprefix("aten::")] += 1
    return {"kernels": dict(kernels.most_common(NAMES_KEPT)), "ops": dict(ops.most_common(NAMES_KEPT)),
            "launches": sorted(set(launched))[:NAMES_KEPT]}


def _module(session: Session, name: str, source: str):
    path = os.path.join(session.workdir, f"{name}.py")
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(session: Session, msg: dict, fd: int | None) -> tuple[dict, list]:
    init = wire.decode(msg["init"], fd, msg["max_bytes"], session.device)
    try:
        module = _module(session, "candidate", msg["code"])
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import too
        return _error("load", exc), []
    model_cls = getattr(module, "ModelNew", None)
    if not isinstance(model_cls, type):
        return {"error": "load: the candidate defines no class ModelNew"}, []
    torch.manual_seed(msg["init_seed"])
    try:
        model = model_cls(*init)
        session.model = model.to(session.device) if isinstance(model, torch.nn.Module) else model
    except BaseException as exc:  # noqa: BLE001
        return _error("__init__", exc), []
    return {"ok": True}, []


def _call(session: Session, msg: dict, fd: int | None) -> tuple[dict, list]:
    inputs = wire.decode(msg["inputs"], fd, msg["max_bytes"], session.device)
    if msg.get("refill"):  # the same tensors as the last call, new contents: an output cached by address goes stale
        for dst, src in zip(session.previous, inputs):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        inputs = session.previous
    session.previous = inputs
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    audit = OpAudit(session.extra_allowed_ops)
    session.recorder.names.clear()
    try:
        with torch.set_grad_enabled(bool(msg["grad"])), _profile(session.device == "cuda") as prof, audit:
            out = session.model(*inputs)
            session.synchronize()
    except BaseException as exc:  # noqa: BLE001
        return _error("forward", exc), []
    outputs = _flat(out)
    tensors = [o if type(o) is torch.Tensor else None for o in outputs]
    reply = {
        "types": [_type_name(o) for o in outputs],
        "audit_ops": sorted(audit.compute_ops),
        "mutated": not all(_same(a, b) for a, b in zip(before, inputs)),
        **_summarize(prof, session.recorder.names),
    }
    if any(t is None for t in tensors):
        return reply, []
    items, payload = wire.encode(tensors)
    reply["outputs"] = items
    return reply, payload


def _same(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    equal = a == b
    if a.is_floating_point() or a.is_complex():
        equal |= a.isnan() & b.isnan()
    return bool(equal.all())


def _stage(session: Session, msg: dict, fd: int | None) -> tuple[dict, list]:
    session.task, session.size = _module(session, "task", msg["task_source"]), msg["size"]
    session.sets = [draw_inputs(session.task, session.size, seed, session.device) for seed in msg["seeds"]]
    return {"ok": True}, []


def _noop(*inputs: Any) -> None:
    return None


def _trial(session: Session, msg: dict, fd: int | None) -> tuple[dict, list]:
    k = msg["set"]
    fresh = draw_inputs(session.task, session.size, msg["seed"], session.device)
    fn = _noop if msg.get("null") else session.model
    try:
        ms, out = timed_trial(fn, session.sets[k], fresh, session.flush, session.event, session.synchronize)
    except BaseException as exc:  # noqa: BLE001
        return _error("timing", exc), []
    if out is not None:
        session.last[k] = out
    return {"ms": ms}, []


def _profile_op(session: Session, msg: dict, fd: int | None) -> tuple[dict, list]:
    if msg.get("start"):
        session.recorder.names.clear()
        session.profiler = _profile(True)
        session.profiler.__enter__()
        return {"ok": True}, []
    session.profiler.__exit__(None, None, None)
    reply = _summarize(session.profiler, session.recorder.names)
    outputs = [_flat(session.last.get(k)) for k in range(len(session.sets))]
    if any(type(o) is not torch.Tensor for out in outputs for o in out):
        return {**reply, "error": "timing: an output is not a plain tensor"}, []
    items, payload = wire.encode([o for out in outputs for o in out])
    reply.update(outputs=items, per_set=len(outputs[0]))
    return reply, payload


HANDLERS = {"load": _load, "call": _call, "stage": _stage, "trial": _trial, "profile": _profile_op}


def serve(sock: socket.socket, workdir: str, device: str, flush_mb: int, extra_allowed_ops: tuple[str, ...],
          violations: list[str], layers: list[str]) -> None:
    """Answer the judge until it closes the socket. The process exits after; a candidate that kills it first is
    reported by the monitor's exit status. `layers`: the containment in force, for the verdict."""
    session = Session(workdir, device, flush_mb, extra_allowed_ops, violations)
    wire.send(sock, {"ready": True, "layers": layers})
    while True:
        try:
            msg, fd = wire.recv(sock, deadline=float("inf"))
        except wire.WireError:
            return
        seen = len(session.violations)
        try:
            handler = HANDLERS.get(msg.get("op"))
            reply, tensors = handler(session, msg, fd) if handler else ({"error": f"unknown op {msg.get('op')!r}"}, [])
        except BaseException as exc:  # noqa: BLE001 - whatever the candidate made of this process, answer
            reply, tensors = _error(str(msg.get("op")), exc), []
        finally:
            if fd is not None:
                os.close(fd)
        sys.stdout.flush()
        reply["violations"] = session.violations[seen:] + patched(session)
        try:
            wire.send(sock, reply, tensors)
        except (OSError, TypeError, ValueError, wire.WireError) as exc:
            wire.send(sock, {"error": f"reply: {type(exc).__name__}: {str(exc)[:ERROR_CHARS]}"})
