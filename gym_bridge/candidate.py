"""The candidate process: the only place a candidate's code runs, and nothing here decides anything.

Forked from the pool's zygote (which never touched CUDA) for one candidate, held by the OS (containment.py) and then
discarded. While it is still clean it sets up its instruments: the device, Triton's launch recorder, the op audit
(a dispatch mode), the audit hook, and a snapshot of the process (integrity.py). Then it loads the candidate and
answers the judge's requests (wire.py):

    stage     the task (its source: references are not secret) and the timing input sets, drawn on the device from
              seeds the judge sends (GPU only)
    trial     one timed request: refill an input set from a seed revealed only now, time one call with CUDA events,
              and answer with the time and a fingerprint of the outputs under a key revealed only now (timing.py);
              "null" times a no-op instead and fingerprints the last trial's outputs: the same steps but the call,
              which the judge subtracts from the trials on its clock
    load      the candidate's module, and ModelNew built under the judge's initialization seed
    call      one forward on the inputs a seed of the judge's stands for (drawn here, as the judge draws its own
              copy): the outputs (into the judge's reply buffer), their types, the Triton launches, the aten ops
              that the dispatch audit and the profiler saw, whether the inputs changed
    profile   a few calls on one input set under the profiler, each output detached as a trial's fingerprint does
              (work deferred to that moment shows here): the kernels, their device time, the ops

While Triton compiles and while a call's outputs are copied into the reply, the process gives the judge's shared hold
on the GPU back (turn messages before the reply, judge.Turn): the GPU is not this process's then.

Every answer is a claim: the judge compares outputs and fingerprints with its own reference and times each trial on
its own clock. What this process finds against the candidate (a refusal of the audit hook, a changed instrument, a
hook left behind) leaves through an append-only pipe (containment.reporter), so nothing the candidate does later
takes it back.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import signal
import socket
import sys
import time
import traceback
from collections import Counter
from typing import Any

import torch

from . import wire
from .integrity import Snapshot
from .launch_hook import LaunchRecorder
from .op_audit import OpAudit
from .timing import draw_inputs, projection, refill, timed_call

ERROR_CHARS = 4000  # of a traceback, its end
SIGNALS = set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


@contextlib.contextmanager
def candidate_code():
    """Signals are delivered only while the candidate's own code runs (its module, ModelNew, its calls), where the
    instruments watch: a handler or an interval timer it leaves behind cannot compute between the harness's steps."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
NAMES_KEPT = 200  # kernel and op names reported per profile
OUTPUTS_MARK = "gym:outputs"  # the profiler range in which the harness detaches the outputs the call returned


class Session:
    """What one candidate process holds: its device, instruments, the loaded model and the timing buffers."""

    def __init__(self, sock: socket.socket, workdir: str, device: str, extra_allowed_ops: tuple[str, ...],
                 report) -> None:
        self.sock, self.workdir, self.device, self.report = sock, workdir, device, report
        self.recorder = LaunchRecorder().install()
        self.handed_back = False
        if device == "cuda":
            _compile_without_the_gpu(self)
        self.extra_allowed_ops = extra_allowed_ops
        self.model: Any = None
        self.task: Any = None
        self.size = ""
        self.sets: list[list] = []  # timing inputs, refilled in place by every trial
        self.last: list[torch.Tensor] = []  # the last trial's outputs, fingerprinted again by a null trial
        self.previous: list = []  # the inputs of the last call, refilled in place by a "refill" call
        # Saved before the candidate exists: the checks and the trial loop use these objects only.
        self.equal, self.isnan = torch.equal, torch.Tensor.isnan
        self.event = torch.cuda.Event if device == "cuda" else None
        self.synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.flush, self.clock = sys.stdout.flush, time.perf_counter  # the bound method: a patch on the object misses
        self.changes = lambda: []
        # Bound now, not looked up per call: a module swapped into sys.modules later cannot blind the profiler.
        self.profile, self.activity, self.mark = torch.profiler.profile, torch.profiler.ProfilerActivity, \
            torch.profiler.record_function

    def audit(self) -> None:
        """Report what changed in the process since the snapshot (each difference once)."""
        for code in self.changes():
            self.report(code)

    def hand_back(self) -> None:
        """Give the judge's shared hold on the GPU back (judge.Turn) once this process's queued kernels have finished:
        what follows runs on the host (a compile) or in the copy engine (outputs into the reply), beside nobody's
        timing. A no-op where the judge holds nothing to give back (an exclusive phase, a CPU gym)."""
        if not self.handed_back:
            self.synchronize()
            self.handed_back = True
            wire.send(self.sock, {"turn": "release"})

    @contextlib.contextmanager
    def compiling(self):
        """Triton compiles on the host: the hold goes back meanwhile, and is taken again before anything launches."""
        if self.handed_back:
            yield
            return
        self.hand_back()
        try:
            yield
        finally:
            wire.send(self.sock, {"turn": "take"})
            wire.close(wire.recv(self.sock, deadline=float("inf"))[1])  # {"turn": "go"}: the judge holds it again
            self.handed_back = False


def _compile_without_the_gpu(session: Session) -> None:
    """Wrap Triton's two host-side builds, the kernel's compile and its launcher's (CompiledKernel's handles, built at
    its first launch), in `session.compiling`."""
    import triton.compiler
    from triton.compiler import compiler

    build, handles = compiler.compile, compiler.CompiledKernel._init_handles

    def compile_(*args, **kwargs):
        with session.compiling():
            return build(*args, **kwargs)

    def init_handles(kernel):
        if kernel.module is not None:  # built already (every launch comes here): nothing to hand back
            return handles(kernel)
        with session.compiling():
            return handles(kernel)

    triton.compiler.compile = compiler.compile = compile_
    compiler.CompiledKernel._init_handles = init_handles


def _error(stage: str, exc: BaseException) -> dict:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:]).strip()
    reply = {"error": f"{stage}: {text[-ERROR_CHARS:]}"}
    if isinstance(exc, SystemExit):
        reply["exit_call"] = True
    return reply


def _flat(out: Any) -> list:
    """The outputs: a plain list or tuple is unpacked, anything else is one output (a subclass whose iteration
    computes would run the candidate's code after the instruments close; it fails the type check instead)."""
    return list(out) if type(out) in (list, tuple) else [out]


def _detach(outputs: list) -> None:
    """Detach each tensor output, as the harness does to every output it fingerprints or sends: work a candidate
    deferred to that moment runs here, inside whatever window observes it."""
    for o in outputs:
        if type(o) is torch.Tensor:
            o.detach()


def _type_name(value: Any) -> str:
    """The output's class by the descriptors of `type` itself: a metaclass's properties run no code here."""
    cls, described = type(value), type.__dict__
    module = described["__module__"].__get__(cls)
    return f"{module if type(module) is str else '?'}.{described['__qualname__'].__get__(cls)}"


def _profile(session: Session, cuda: bool):
    """The profiler; device activity only where kernels are counted (a CUDA session costs ~0.1 s to start and stop,
    and a correctness call needs only the ops)."""
    activity = session.activity
    return session.profile(activities=[activity.CPU] + ([activity.CUDA] if cuda else []))


def _summarize(prof, launched: list[str]) -> dict:
    """Kernel names with their device microseconds, aten op names with their counts (and those that ran while the
    harness handled the outputs, after the call had returned), the Triton launches."""
    kernels: Counter = Counter()
    ops: Counter = Counter()
    late: Counter = Counter()
    events = prof.events()
    marks = [evt.time_range for evt in events if evt.name == OUTPUTS_MARK]
    for evt in events:
        if str(getattr(evt, "device_type", "")).endswith("CUDA"):
            kernels[evt.name] += evt.time_range.elapsed_us()
        elif evt.name.startswith("aten::"):
            op = evt.name.removeprefix("aten::")
            ops[op] += 1
            if any(m.start <= evt.time_range.start <= m.end for m in marks):
                late[op] += 1
    return {"kernels": dict(kernels.most_common(NAMES_KEPT)), "ops": dict(ops.most_common(NAMES_KEPT)),
            "late_ops": dict(late.most_common(NAMES_KEPT)), "launches": sorted(set(launched))[:NAMES_KEPT]}


def _module(session: Session, name: str, source: str):
    path = os.path.join(session.workdir, f"{name}.py")
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outputs(session: Session, values: list, fd: int | None) -> dict:
    """The outputs written into the judge's reply buffer, described; or why they could not be."""
    try:
        return {"outputs": wire.write_into(fd, values)}
    except wire.WireError as err:
        return {"mismatch": f"unusable outputs ({err})"}


def _task(session: Session, msg: dict) -> None:
    """The task module (its source comes with the first request that needs it) and the size its inputs take."""
    if session.task is None:
        session.task, session.size = _module(session, "task", msg["task_source"]), msg["size"]


def _load(session: Session, msg: dict, fds: list[int]) -> dict:
    _task(session, msg)
    init = draw_inputs(session.task, session.size, msg["init_seed"], session.device, "get_init_inputs")
    try:
        with candidate_code():
            module = _module(session, "candidate", msg["code"])
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import too
        return _error("load", exc)
    model_cls = module.__dict__.get("ModelNew")
    if not isinstance(model_cls, type):
        return {"error": "load: the candidate defines no class ModelNew"}
    torch.manual_seed(msg["init_seed"])
    try:
        with candidate_code():
            model = model_cls(*init)
            session.model = model.to(session.device) if isinstance(model, torch.nn.Module) else model
    except BaseException as exc:  # noqa: BLE001
        return _error("__init__", exc)
    return {"ok": True}


def _call(session: Session, msg: dict, fds: list[int]) -> dict:
    """One correctness call on the inputs the judge's seed stands for (drawn here, as the judge draws its copy)."""
    inputs = draw_inputs(session.task, session.size, msg["seed"], session.device)
    if msg.get("refill"):  # the same tensors as the last call, new contents: an output cached by address goes stale
        refill(session.previous, inputs)
        inputs = session.previous
    session.previous = inputs
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    audit = OpAudit(session.extra_allowed_ops)
    session.recorder.names.clear()
    try:
        with torch.set_grad_enabled(bool(msg["grad"])), _profile(session, cuda=False) as prof:
            with audit:
                with candidate_code():
                    out = session.model(*inputs)
                session.synchronize()
            outputs = _flat(out)
            with session.mark(OUTPUTS_MARK):  # what the harness does to outputs computes nothing
                _detach(outputs)
    except BaseException as exc:  # noqa: BLE001
        return _error("forward", exc)
    reply = {
        "types": [_type_name(o) for o in outputs],
        "audit_ops": sorted(audit.compute_ops),
        "mutated": not all(_same(session, a, b) for a, b in zip(before, inputs)),
        **_summarize(prof, session.recorder.names),
    }
    if all(type(o) is torch.Tensor for o in outputs):
        session.hand_back()  # copying the outputs out computes nothing
        reply.update(_outputs(session, outputs, fds[0] if fds else None))
    return reply


def _same(session: Session, a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if session.equal(a, b):
        return True
    return (a.is_floating_point() or a.is_complex()) and session.equal(session.isnan(a), session.isnan(b)) and \
        session.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def _stage(session: Session, msg: dict, fds: list[int]) -> dict:
    _task(session, msg)
    session.sets = [draw_inputs(session.task, session.size, seed, session.device) for seed in msg["seeds"]]
    return {"ok": True}


def _noop(*inputs: Any) -> None:
    return None


def _trial(session: Session, msg: dict, fds: list[int]) -> dict:
    """One timed request; everything in it is on the judge's clock. The collector is off in it (a finalizer of the
    candidate's garbage would otherwise run inside a null trial and lengthen what the judge subtracts)."""
    null = bool(msg.get("null"))
    if null and not session.last:
        return {"error": "timing: a null trial before any timed trial"}
    inputs = session.sets[msg["set"]]
    collecting = gc.isenabled()
    gc.disable()
    try:
        refill(inputs, draw_inputs(session.task, session.size, msg["seed"], session.device))
        session.synchronize()
        started = session.clock()
        with candidate_code():  # a null trial unblocks too: the same steps, the same cost
            ms, out = timed_call(_noop if null else session.model, inputs, session.event, session.synchronize)
        host_ms = (session.clock() - started) * 1e3
        outputs = session.last if null else _flat(out)
        if not all(type(o) is torch.Tensor for o in outputs):
            return {"error": "timing: an output is not a plain tensor"}
        fingerprint, _ = projection(outputs, msg["key"], session.device)
        session.last = outputs
    except BaseException as exc:  # noqa: BLE001
        return _error("timing", exc)
    finally:
        if collecting:
            gc.enable()
    return {"ms": ms, "host_ms": host_ms, "fingerprint": fingerprint}


def _profile_op(session: Session, msg: dict, fds: list[int]) -> dict:
    inputs = session.sets[msg["set"]]
    session.recorder.names.clear()
    try:
        with torch.no_grad(), _profile(session, cuda=True) as prof:
            for _ in range(msg["calls"]):
                with candidate_code():
                    out = session.model(*inputs)
                _detach(_flat(out))
                session.synchronize()
    except BaseException as exc:  # noqa: BLE001
        return _error("profile", exc)
    return _summarize(prof, session.recorder.names)


HANDLERS = {"load": _load, "call": _call, "stage": _stage, "trial": _trial, "profile": _profile_op}


def hide(package: str) -> tuple:
    """Take the gym's modules out of sys.modules and their parents, so that no name looked up from a string reaches
    the harness (importing them again is refused by the audit hook); the harness keeps its own references. Returns
    the harness modules, for the snapshot."""
    mine = tuple(m for name, m in list(sys.modules.items()) if name == package or name.startswith(package + "."))
    for module in mine:
        sys.modules.pop(module.__name__, None)
    root = sys.modules.get(package.split(".")[0])
    if root is not None and root.__name__ != package:
        sys.modules.pop(root.__name__, None)
    return mine


def serve(sock: socket.socket, workdir: str, device: str, extra_allowed_ops: tuple[str, ...], report,
          layers: list[str], snapshot_of: tuple) -> None:
    """Answer the judge until it closes the socket. The process exits after; a candidate that kills it first is
    reported by the monitor's exit status. `layers`: the containment in force, for the verdict; `snapshot_of`: the
    harness modules the snapshot watches."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    session = Session(sock, workdir, device, extra_allowed_ops, report)
    session.changes = Snapshot(snapshot_of).changes  # a bound method: a patch on the class later misses it
    try:
        wire.close(wire.recv(sock, deadline=float("inf"))[1])  # the judge asks once a job takes this process
    except wire.WireError:
        return
    wire.send(sock, {"ready": True, "layers": layers})
    while True:
        try:
            msg, fds = wire.recv(sock, deadline=float("inf"))
        except wire.WireError:
            return
        op = msg.get("op")
        session.handed_back = False  # each request starts under whatever hold the judge took for it
        try:
            handler = HANDLERS.get(op)
            reply = handler(session, msg, fds) if handler else {"error": f"unknown op {op!r}"}
        except BaseException as exc:  # noqa: BLE001 - whatever the candidate made of this process, answer
            reply = _error(str(op), exc)
        finally:
            wire.close(fds)
        if op != "trial":  # a trial's window is the judge's clock: the next request's audit covers it
            session.audit()
        session.flush()
        try:
            wire.send(sock, reply)
        except (OSError, TypeError, ValueError, wire.WireError) as exc:
            wire.send(sock, {"error": f"reply: {type(exc).__name__}: {str(exc)[:ERROR_CHARS]}"})
