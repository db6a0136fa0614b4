"""Record which Triton kernels actually launch.

Triton 3.x funnels every launch through `run` of the kernel object: `JITFunction.run` when compiled,
`InterpretedFunction.run` under TRITON_INTERPRET=1, reached from `kernel[grid](...)`, from `Autotuner.run`
and `Heuristics.run`. An AOT `CompiledKernel[grid]` bypasses them, so its `run` is wrapped too where it
exists. A name is recorded only after the launch returns, so a launch that raised (a try/except fallback)
does not count.
"""
from __future__ import annotations

import functools
from typing import Callable


class LaunchRecorder:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.wrappers: list[tuple[type, str, Callable]] = []

    def install(self) -> "LaunchRecorder":
        from triton.runtime import jit

        targets = [(jit.JITFunction, "run")]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            targets.append((InterpretedFunction, "run"))
        except ImportError:  # pragma: no cover - older triton without the interpreter module
            pass
        try:
            from triton.compiler.compiler import CompiledKernel

            targets.append((CompiledKernel, "__getitem__"))
        except ImportError:  # pragma: no cover
            pass
        for cls, attr in targets:
            original = getattr(cls, attr, None)
            if original is None:
                continue
            wrapped = self._wrap(original, attr)
            setattr(cls, attr, wrapped)
            self.wrappers.append((cls, attr, wrapped))
        return self

    def _wrap(self, original: Callable, attr: str) -> Callable:
        names = self.names

        if attr == "__getitem__":  # CompiledKernel[grid] returns the launcher
            @functools.wraps(original)
            def getitem(kernel, grid):
                launch = original(kernel, grid)

                def runner(*args, **kwargs):
                    out = launch(*args, **kwargs)
                    names.append(getattr(kernel, "name", "compiled_kernel"))
                    return out

                return runner

            return getitem

        @functools.wraps(original)
        def run(kernel, *args, **kwargs):
            out = original(kernel, *args, **kwargs)
            if not kwargs.get("warmup", False):
                fn = getattr(kernel, "fn", None)
                names.append(getattr(fn, "__name__", None) or getattr(kernel, "__name__", "triton_kernel"))
            return out

        return run

    def intact(self) -> list[str]:
        """Names of launch paths the candidate replaced since install (empty when none)."""
        return [f"{cls.__qualname__}.{attr}" for cls, attr, wrapper in self.wrappers
                if cls.__dict__.get(attr) is not wrapper]
