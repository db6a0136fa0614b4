"""Timing: the inter-process GPU lock, the inputs a seed stands for, and one timing trial.

The judge times the reference and a candidate process times the candidate with the same `timed_trial`; the
judge's own clock around each of the candidate's trials checks what the candidate process reports (judge.py).
"""
from __future__ import annotations

import contextlib
import fcntl
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
    Sharers do not exclude each other. flock: the kernel releases the lock when its holder dies (timeout kill,
    crash).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)

    @contextlib.contextmanager
    def hold(self, timeout_s: float) -> Iterator[float]:
        """Yields the seconds spent waiting; TimeoutError when the lock stays taken for `timeout_s`."""
        started = clock()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() - started > timeout_s:
                    raise TimeoutError(f"the GPU timing lock {self.path} stayed taken for {timeout_s:g} s") from None
                _sleep(0.005)
        try:
            yield clock() - started
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def share(self) -> Iterator[None]:
        """Shared hold, waiting as long as a timing takes; not re-entrant (a nested exit would release it)."""
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
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


def timed_trial(fn: Callable, inputs: Sequence, fresh: Sequence, flush: torch.Tensor | None, event: type,
                synchronize: Callable[[], None]) -> tuple[float, object]:
    """One timing trial, the same in the judge (the reference) and in a candidate process: refill the inputs in place
    with `fresh` values (same tensors, new contents: an output cached by address or shape goes stale), overwrite the
    L2 with `flush`, synchronize the device, then CUDA events around the call and a device-wide synchronize, so work
    the call left on other streams is counted. Returns (milliseconds, output)."""
    for dst, src in zip(inputs, fresh):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
    if flush is not None:
        flush.zero_()
    start, end = event(enable_timing=True), event(enable_timing=True)
    with torch.no_grad():
        synchronize()
        start.record()
        out = fn(*inputs)
        synchronize()
        end.record()
        end.synchronize()
    return start.elapsed_time(end), out
