"""GPU timing and profiler coverage, run inside the worker with references saved before the candidate loaded.

Each trial: refill the inputs in place with fresh values (so an output cache keyed on data_ptr or shape
returns stale results, which the re-check after timing catches), write a 256 MB buffer (L2 flush), then
device-wide synchronize, record the start event, call, synchronize the whole device (so work on side
streams is counted) and record the end event. Median and IQR over the trials.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

# Bound before any candidate loads (a candidate may patch the time module; the harness flags that, and the lock
# must still wait correctly).
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


@dataclass(frozen=True)
class TimingTools:
    """Saved before the candidate loads; timing only ever uses these objects."""

    event: type
    synchronize: Callable[[], None]
    elapsed: Callable

    @classmethod
    def capture(cls) -> "TimingTools":
        return cls(torch.cuda.Event, torch.cuda.synchronize, torch.cuda.Event.elapsed_time)


def refill(inputs: Sequence, values: Sequence) -> None:
    for dst, src in zip(inputs, values):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)


def time_calls(fn: Callable, input_sets: list[list], value_sets: list[list], *, warmup: int, trials: int,
               flush_mb: int, tools: TimingTools) -> tuple[float, float, list]:
    """(median ms, IQR ms, last output per input set)."""
    flush = torch.empty(flush_mb << 18, dtype=torch.int32, device="cuda") if flush_mb else None
    outputs: list = [None] * len(input_sets)
    with torch.no_grad():
        for i in range(warmup):
            fn(*input_sets[i % len(input_sets)])
        tools.synchronize()
        times = []
        for i in range(trials):
            k = i % len(input_sets)
            refill(input_sets[k], value_sets[i % len(value_sets)])
            if flush is not None:
                flush.zero_()
            start, end = tools.event(enable_timing=True), tools.event(enable_timing=True)
            tools.synchronize()
            start.record()
            outputs[k] = fn(*input_sets[k])
            tools.synchronize()
            end.record()
            end.synchronize()
            times.append(tools.elapsed(start, end))
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0], outputs


def kernel_coverage(fn: Callable, inputs: list, launched: set[str], iters: int, tools: TimingTools) -> float | None:
    """Share of CUDA kernel time spent in kernels named like the candidate's launched Triton kernels
    (the paper's PR = T_generated / T_total over device time only). None when the profiler saw nothing."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn(*inputs)
        tools.synchronize()
    total = mine = 0.0
    for evt in prof.events():
        if str(getattr(evt, "device_type", "")).endswith("CUDA") and evt.time_range.elapsed_us() > 0:
            dur = evt.time_range.elapsed_us()
            total += dur
            if any(name and (name in evt.name or evt.name in name) for name in launched):
                mine += dur
    return mine / total if total else None
