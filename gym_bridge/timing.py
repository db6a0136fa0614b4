"""Timing: the inter-process GPU lock, the inputs a seed stands for, one timed call, and the fingerprint of a timed
call's outputs.

The judge times the reference and a candidate process times the candidate with the same `timed_call`; the judge's
own clock around each of the candidate's timed requests is what the reward uses, and what the candidate process
reports can only make its time longer (judge.py).
"""
from __future__ import annotations

import contextlib
import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

import torch

clock, _sleep = time.monotonic, time.sleep


class DeviceLock:
    """An inter-process lock on one GPU: held exclusively while a candidate is timed and profiled (`hold`), and
    shared while other GPU work that must not overlap a timing runs (`share`: the RL policy's sampling and
    updates on the GPU the gym times on).

    Workers sharing a GPU (LocalPool with more workers than GPUs, or two RL runs on one machine) load, compile
    and check candidates at the same time, but never time two at once: a kernel timed beside another process's
    kernels is slowed by them (measured on the H200 beside a sampling policy: swiglu 2.47 ms instead of 0.09 ms).
    Sharers do not exclude each other. A timing that waits goes first: it holds a gate (a second lock file) that
    every new sharer passes through, so sharers that keep overlapping cannot keep it waiting. flock: the kernel
    releases the locks when their holder dies (timeout kill, crash).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self.gate = os.open(path + ".gate", os.O_RDWR | os.O_CREAT, 0o666)

    def _poll(self, fd: int, started: float, timeout_s: float) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if clock() - started > timeout_s:
                    raise TimeoutError(f"the GPU timing lock {self.path} stayed taken for {timeout_s:g} s") from None
                _sleep(0.005)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.gate)

    @contextlib.contextmanager
    def hold(self, timeout_s: float) -> Iterator[float]:
        """Yields the seconds spent waiting; TimeoutError when the lock stays taken for `timeout_s`."""
        started = clock()
        self._poll(self.gate, started, timeout_s)  # from here new sharers wait behind this timing
        try:
            self._poll(self.fd, started, timeout_s)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield clock() - started
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def share(self) -> Iterator[float]:
        """Shared hold, waiting as long as a timing takes, and behind a timing that waits (yields the seconds
        waited); not re-entrant (a nested exit would release it)."""
        waited = self.take_shared()
        try:
            yield waited
        finally:
            self.release()

    def take_shared(self) -> float:
        """`share` without the context, for a hold handed back and taken again (judge.Turn): the seconds waited."""
        started = clock()
        fcntl.flock(self.gate, fcntl.LOCK_SH)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        return clock() - started

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


def draw_inputs(task: ModuleType, size: str, seed: int, device: str, which: str = "get_inputs") -> list:
    """The task's inputs (or init inputs) for `seed`, made on `device`: tensor factories default to it, and a tensor
    the task makes elsewhere (KernelBench's get_inputs returns CPU tensors) is moved there. The same seed gives the
    same values in any process (the generators are seeded by torch.manual_seed)."""
    fn = getattr(task, which)
    torch.manual_seed(seed)
    with torch.device(device):
        values = list(fn(size) if hasattr(task, "SIZES") else fn())
    return _to_device(values, device)


def _to_device(obj, device: str):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device) for o in obj)
    return obj


def refill(inputs: Sequence, fresh: Sequence) -> None:
    """New contents in the same tensors: an output cached by address or shape goes stale."""
    for dst, src in zip(inputs, fresh):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def timed_call(fn: Callable, inputs: Sequence, event: type, synchronize: Callable[[], None]) -> tuple[float, object]:
    """One timed call, as KernelBench times one: CUDA events around the call on the current stream, then a
    device-wide synchronize (so work left on other streams has finished before anything else runs; the judge's clock
    around the whole request counts it). The device must be idle when it starts. Returns (milliseconds, output)."""
    start, end = event(enable_timing=True), event(enable_timing=True)
    with torch.no_grad():
        start.record()
        out = fn(*inputs)
        end.record()
        synchronize()
    return start.elapsed_time(end), out


def projection(outputs: Sequence, key: int, device: str) -> tuple[float, list[torch.Tensor]]:
    """A fingerprint of `outputs`: their sum weighted by uniform(-1, 1) weights drawn from `key`, accumulated in
    float64. The judge asks for it with every timed call, with a key revealed only in that call's request, and
    compares it with the reference's: the call must have computed its whole output inside the window the judge timed.
    Returns (the fingerprint, the weights)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(key)
    total, weights = 0.0, []
    for out in outputs:
        w = torch.rand(out.shape, generator=gen, device=device, dtype=torch.float32).mul_(2).sub_(1)
        total += float(torch.sum(out.detach().to(torch.float32) * w, dtype=torch.float64))
        weights.append(w)
    return total, weights


def projection_tolerance(reference: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], atol: Sequence[float],
                         rtol: Sequence[float]) -> float:
    """How far the fingerprint of outputs that match `reference` within (atol, rtol) elementwise may lie from the
    reference's own. The weights are drawn after the outputs exist, independent of their errors e_i (|e_i| <= t_i =
    atol + rtol·|ref_i|), so sum(w_i·e_i) stays within 6·sqrt(sum(t_i²)) but with probability 2·exp(-18)
    (Hoeffding); plus the float32 rounding of the products on both sides. An output computed from other inputs is
    off by about sqrt(n) times its typical value, far outside."""
    spread, rounding = 0.0, 0.0
    for ref, w, a, r in zip(reference, weights, atol, rtol):
        mag = ref.detach().to(torch.float32).abs()
        spread += float(torch.sum(torch.square(mag * r + a), dtype=torch.float64))
        rounding += float(torch.sum(mag * w.abs(), dtype=torch.float64))
    return 6.0 * math.sqrt(spread) + 2.0 ** -22 * rounding + 1e-9
