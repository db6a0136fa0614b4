"""What a candidate process must find unchanged after the candidate's code has run: a snapshot taken while the
process is still clean, and the list of what differs.

The candidate process's instruments (the launch recorder, the op audit, the profiler, the harness that answers the
judge) are objects in the candidate's own process. A candidate that replaces one of them, or leaves code behind that
runs outside its calls (a signal handler, a trace or profile hook, a gc callback, a replaced sys.stdout, a fake module
in sys.modules), could make them report what it likes, or compute where no instrument watches. The harness compares
the process against this snapshot after every request that runs candidate code; each difference is a verdict. It is a
tripwire, not the guarantee: what the process reports can only lower a reward, and the judge measures correctness
and time itself (judge.py).
"""
from __future__ import annotations

import gc
import os
import signal
import sys
from types import ModuleType

import torch

# Modules whose every attribute must keep its identity: the harness's, and what it measures and answers with.
WATCHED_MODULES = ("torch", "torch.nn.functional", "torch.cuda", "torch.profiler", "torch.autograd.profiler",
                   "torch.autograd.profiler_util", "torch.library", "torch.utils._python_dispatch", "time", "json",
                   "json.encoder", "json.decoder", "mmap", "socket", "os", "sys", "signal", "gc", "builtins",
                   "triton.runtime.jit")
# Classes likewise (their own __dict__).
WATCHED_CLASSES = {"torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
                   "torch.cuda.Event": torch.cuda.Event}
SYS_HOOKS = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "displayhook", "excepthook", "unraisablehook",
             "breakpointhook")
PRECISION_FLAGS = {  # fp32 is compared at fp32 tolerance: TF32 would be a downcast
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
}
_ITIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


def _members(namespace: dict) -> dict[str, int]:
    """Identity of every function, class and module it names: what a patch replaces (data changes legitimately)."""
    return {name: id(value) for name, value in list(namespace.items())
            if callable(value) or isinstance(value, ModuleType)}


class Snapshot:
    """The process's state as the harness left it, taken before the candidate's code exists."""

    def __init__(self, harness_modules: tuple[ModuleType, ...]) -> None:
        modules = [sys.modules[name] for name in WATCHED_MODULES if name in sys.modules] + list(harness_modules)
        self.modules = {m.__name__: (m, _members(vars(m))) for m in modules}
        self.module_ids = {name: id(sys.modules.get(name)) for name in self.modules}
        classes = {**WATCHED_CLASSES, **{f"{m.__name__}.{name}": value for m in harness_modules
                                         for name, value in vars(m).items()
                                         if isinstance(value, type) and value.__module__ == m.__name__}}
        self.classes = {name: (cls, _members(dict(cls.__dict__))) for name, cls in classes.items()}
        self.hooks = {name: id(getattr(sys, name, None)) for name in SYS_HOOKS}
        self.signals = {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (signal.SIGKILL,
                                                                                            signal.SIGSTOP)}
        self.gc_callbacks = list(gc.callbacks)
        self.gc_enabled = gc.isenabled()
        self.default_dtype = torch.get_default_dtype()
        self.environ = dict(os.environ)

    def changes(self) -> list[str]:
        """Every difference from the snapshot, as verdict codes ("monkey_patch:..." or "hook:...")."""
        bad: list[str] = []
        for name, (module, members) in self.modules.items():
            if id(sys.modules.get(name)) != self.module_ids[name]:
                bad.append(f"monkey_patch:sys.modules[{name!r}]")
            bad += _differences(name, vars(module), members)
        for name, (cls, members) in self.classes.items():
            bad += _differences(name, cls.__dict__, members)
        bad += [f"hook:sys.{name}" for name, ident in self.hooks.items() if id(getattr(sys, name, None)) != ident]
        if sys.gettrace() is not None or sys.getprofile() is not None:
            bad.append("hook:a trace or profile function")
        for sig, handler in self.signals.items():
            if signal.getsignal(sig) != handler:
                bad.append(f"hook:signal handler for {signal.Signals(sig).name}")
        if any(signal.getitimer(which) != (0.0, 0.0) for which in _ITIMERS):
            bad.append("hook:an interval timer")
        if gc.callbacks != self.gc_callbacks or gc.isenabled() != self.gc_enabled:
            bad.append("hook:gc")
        bad += [f"monkey_patch:{name}" for name, get in PRECISION_FLAGS.items() if get()]
        if torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack():
            bad.append("monkey_patch:a torch mode left active")
        if torch.get_default_dtype() != self.default_dtype:
            bad.append("monkey_patch:torch.set_default_dtype")
        if dict(os.environ) != self.environ:
            bad.append("monkey_patch:os.environ")
        return bad


def _differences(owner: str, namespace, members: dict[str, int]) -> list[str]:
    """Functions, classes and modules replaced or removed, and functions added (a submodule imported later is not
    a patch)."""
    now = dict(namespace)
    changed = [k for k, ident in members.items() if k not in now or id(now[k]) != ident]
    added = [k for k, v in now.items() if k not in members and not k.startswith("__") and callable(v)
             and not isinstance(v, ModuleType)]
    return [f"monkey_patch:{owner}.{k}" for k in sorted(changed + added)[:8]]
