"""The worker side: the wire protocol and `serve`, run in a process forked by the zygote (zygote.py).

`serve` installs the launch recorder and the sandbox (rlimits, audit hook), then answers jobs: one
length-prefixed JSON message in, one out. JSON, never pickle, so a hostile worker cannot run code in
the parent. The candidate's stdout/stderr go to a log file in the temp dir, never to the protocol pipe.
"""
from __future__ import annotations

import faulthandler
import json
import math
import os
import struct
import sys
import tempfile

HEADER = struct.Struct(">I")


def send(fd: int, msg: dict) -> None:
    data = json.dumps(msg, default=str, allow_nan=False).encode()
    payload = HEADER.pack(len(data)) + data
    while payload:
        payload = payload[os.write(fd, payload):]


def recv(fd: int) -> dict | None:
    def read(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = read(HEADER.size)
    if head is None:
        return None
    body = read(HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _warm_up_triton() -> None:
    """Build Triton's launcher stubs before the sandbox refuses compiler processes that nothing attributes
    to Triton (and so the first candidate is not charged for it)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _fill(ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs, 1.0, mask=offs < n)

    buf = torch.zeros(8, device="cuda")
    _fill[(1,)](buf, 8, BLOCK=16)
    torch.cuda.synchronize()


def serve(in_fd: int, out_fd: int, workdir: str, memory_mb: int, cpu_s: int, timing_lock: str | None = None) -> None:
    """Arm the sandbox in this (freshly forked) process and answer jobs until the parent closes `in_fd`.
    `timing_lock`: the lock file of this worker's GPU (see timing.DeviceLock), opened before the sandbox."""
    log = os.open(os.path.join(workdir, "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable(file=sys.stderr)
    for sub in ("tasks", "candidates"):
        os.makedirs(os.path.join(workdir, sub), exist_ok=True)
    # The fork server cached its own temp dir; Triton's compiler (ptxas temp files) must use this worker's.
    tempfile.tempdir = None

    import numpy
    import torch
    import triton

    from . import harness, sandbox
    from .launch_hook import LaunchRecorder
    from .timing import DeviceLock, TimingTools

    harness.disable_tf32()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sandbox.apply_rlimits(memory_mb=None if device == "cuda" else memory_mb, cpu_s=cpu_s)
    tools = lock = None
    if device == "cuda":
        _warm_up_triton()
        tools = TimingTools.capture()
        lock = DeviceLock(timing_lock) if timing_lock else None

    recorder = LaunchRecorder().install()
    trusted = tuple(os.path.dirname(m.__file__) for m in (torch, triton, numpy))
    violations = sandbox.install_audit_hook(workdir, os.path.join(workdir, "candidates"), trusted)
    ctx = harness.WorkerContext(workdir=workdir, device=device, violations=violations, recorder=recorder, tools=tools,
                                lock=lock)
    send(out_fd, {"ready": os.getpid(), "device": device})
    while (job := recv(in_fd)) is not None:
        sandbox.extend_cpu_budget(cpu_s)
        result = harness.run_job(job, ctx)
        result["nonce"] = job["nonce"]
        sys.stdout.flush()
        send(out_fd, _finite(result))
