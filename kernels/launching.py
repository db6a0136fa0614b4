"""Host side of a launch: grid arithmetic, and launching a built kernel without Triton's per-call dispatch.

`kernel[grid](...)` binds and specializes every argument, hashes a cache key and checks the globals the kernel read,
on every call: 22-37 us a launch on the H200 (triton 3.6), where the built kernel's own launcher takes ~9 us
(BENCHMARKS.md, Kernels, 2026-12-04). The attention then made seven launches per forward + backward, so on short
documents the GPU waited for the host. `Launcher` keeps the built kernels Triton returned, keyed by all that Triton
specializes a build on and more (each scalar's exact value, with its class for a bool or a float; each tensor's dtype
and 16-byte alignment; the constexprs, warps, stages, register cap and device), and launches a key it has seen
through that kernel's launcher, as Triton's own `run` does after its lookup. A new key goes through Triton, which
builds or finds the right kernel and returns it.

A seen key's launch also skips what Triton's built launcher does per call for nothing. It passes each tensor as its
device address (an int), where the built launcher would call its `data_ptr` and ask the driver whether the address
is a device one: the key holds `is_cuda`, so a host tensor's first call goes through Triton, which refuses it. And it
passes no launch hooks, where the built launcher would build launch metadata and call both hook chains from C,
empty as triton 3.6 keeps them unless a profiler installs one (then the launch passes the tensors and the hooks, as
Triton's does).
"""
from __future__ import annotations

import torch
import triton
from triton.runtime.jit import JITFunction

try:  # host tensor descriptors: triton >= 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    TensorDescriptor = None

# Triton's launch options a caller may pass beside the kernel's arguments: each is part of what a build is for.
_OPTIONS = ("num_warps", "num_stages", "maxnreg")
CACHE_LIMIT = 256  # keys per kernel; a caller cycling through more shapes starts over rather than grow without bound


def cdiv(a: int, b: int) -> int:
    """Ceiling division for grids. triton.cdiv is a constexpr function whose every host call costs ~5 us."""
    return -(-a // b)


def _current_stream(device: int) -> int:
    return triton.runtime.driver.active.get_current_stream(device)


_PLAIN = frozenset((int, str, type(None)))  # arguments that are their own key
# True == 1 == 1.0 (and their hashes): a bool or a float keys with its class, as Triton builds them apart.
_TAGGED = (bool, float)


def _arg_key(value):
    if isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() % 16 == 0, value.is_cuda
    if TensorDescriptor is not None and isinstance(value, TensorDescriptor):
        # A build knows a descriptor by its element type and block shape; shape and strides travel in it at launch.
        return "desc", value.base.dtype, tuple(value.block_shape), getattr(value, "padding", "zero")
    return (value.__class__, value) if isinstance(value, _TAGGED) else value


def _key(values: list) -> list:
    """Each argument's part of the key. Scalars and plain tensors are tested by exact class, inline: a call and two
    isinstance tests per argument (~50 a launch; torch.Tensor's isinstance goes through its metaclass) cost ~1.7x
    the host time."""
    return [v if v.__class__ in _PLAIN else (v.dtype, v.data_ptr() % 16 == 0, v.is_cuda)
            if v.__class__ is torch.Tensor else (v.__class__, v) if v.__class__ in _TAGGED else _arg_key(v)
            for v in values]


def _hooked(hook) -> bool:
    """Whether a launch hook is installed: None or an empty HookChain (triton 3.6's default) is none."""
    return bool(getattr(hook, "calls", hook))


class Launcher:
    """`Launcher(kernel)[grid](*args, **kwargs)`: the same call as `kernel[grid](...)`, minus Triton's dispatch once
    a call with the same key has been made. Under the interpreter (or with a triton that lacks `knobs`, whose
    launcher signature this relies on) every call goes through Triton."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.direct = isinstance(kernel, JITFunction) and hasattr(triton, "knobs")
        self.names = list(getattr(kernel, "arg_names", ()))
        self.built: dict[tuple, object] = {}

    def __getitem__(self, grid: tuple[int, ...]):
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def _launch(self, grid: tuple[int, ...], args: tuple, kwargs: dict) -> None:
        if not self.direct:
            self.kernel[grid](*args, **kwargs)
            return
        options = tuple(kwargs.pop(name, None) for name in _OPTIONS)
        values = [*args, *(kwargs[name] for name in self.names[len(args):])]
        device = torch.cuda.current_device()
        key = (device, options, *_key(values))
        built = self.built.get(key)
        if built is None:
            if len(self.built) >= CACHE_LIMIT:
                self.built.clear()
            extra = {name: value for name, value in zip(_OPTIONS, options) if value is not None}
            self.built[key] = self.kernel[grid](*args, **kwargs, **extra)
            return
        grid = (*grid, 1, 1)
        stream = _current_stream(device)
        hooks = triton.knobs.runtime
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        if _hooked(enter) or _hooked(leave):  # as Triton launches: the hooks see the tensors themselves
            metadata = built.launch_metadata(grid, stream, *values)
        else:
            metadata = enter = leave = None
            # A tensor subclass (a Parameter) goes as itself: the built launcher takes its data_ptr.
            values = [v.data_ptr() if v.__class__ is torch.Tensor else v for v in values]
        built.run(grid[0], grid[1], grid[2], stream, built.function, built.packed_metadata, metadata, enter, leave,
                  *values)
