"""Worker slots and the local pool.

`LocalPool` runs jobs on N slots. A slot is a judge process (judge.py), forked by the pool's `Zygote` (zygote.py) at
its first job and kept for the pool's life; the judge asks the same zygote for a fresh candidate process per job. On
GPUs every slot is pinned to one GPU (CUDA_VISIBLE_DEVICES), one slot per GPU by default; slots sharing a GPU take
turns timing (timing.DeviceLock), and a policy computing on that GPU holds the same lock shared (`gpu_turn`). A judge
that dies, answers garbage or falls silent past the job's timeout plus a margin is an infrastructure fault: it is
replaced and the job retried up to `config.retries` times. A candidate that crashes, hangs or attacks gets its own
verdict from its judge and costs nothing else.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import ContextManager

from . import wire
from .config import Job
from .containment import scrubbed_env
from .result import EvalResult

STARTUP_TIMEOUT_S = 300.0
JUDGE_MARGIN_S = 120.0  # beyond a job's candidate timeout: the reference's own work and timing
GPU_TURNS = 3  # a judge may wait up to a timeout for the GPU's lock in each of its phases (its candidate's clock stops)


class InfraError(RuntimeError):
    """The gym failed (not the candidate): worth a retry."""


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def gym_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A gym process's environment; without a GPU, candidates' kernels run in Triton's interpreter."""
    env = scrubbed_env(workdir, extra)
    if "TRITON_INTERPRET" not in env and not _has_cuda():
        env["TRITON_INTERPRET"] = "1"
    return env


class Zygote:
    """The fork server (zygote.py) of one pool: started once, forks every judge and, for them, every candidate."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.sock, child = socket.socketpair()
        with open(os.path.join(workdir, "zygote.log"), "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-m", "proxycomp.gym_bridge.zygote", str(child.fileno())],
                cwd=workdir, env=gym_env(workdir), pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        child.close()
        self._lock = threading.Lock()
        self._ready = False

    def fork_judge(self, request: dict, fd: int) -> None:
        with self._lock:
            if not self._ready:
                self.sock.settimeout(STARTUP_TIMEOUT_S)
                try:
                    ok = self.sock.recv(16) == b"ready\n"
                except OSError:
                    ok = False
                if not ok:
                    raise InfraError(f"gym zygote failed to start (exit {self.proc.poll()}): {self.log_tail()}")
                self.sock.settimeout(None)
                self._ready = True
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [fd])
            except OSError as exc:
                raise InfraError(f"gym zygote is gone (exit {self.proc.poll()}): {exc}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        with open(os.path.join(self.workdir, "zygote.log"), "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 2000))
            return fh.read().decode(errors="replace").strip()

    def close(self) -> None:
        self.sock.close()  # the zygote exits on EOF
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class JudgeProcess:
    """The pool's handle on one judge process."""

    def __init__(self, zygote: Zygote, workdir: str, env: dict[str, str], timing_lock: str | None,
                 device: str, gpu_share: float) -> None:
        self.workdir = workdir
        self.sock, theirs = wire.pair()
        request = {"workdir": workdir, "env": env, "timing_lock": timing_lock, "device": device, "gpu_share": gpu_share}
        try:
            zygote.fork_judge(request, theirs.fileno())
        finally:
            theirs.close()
        self.pid: int | None = None

    def wait_ready(self) -> None:
        if self.pid is not None:
            return
        try:
            msg, fds = wire.recv(self.sock, _deadline(STARTUP_TIMEOUT_S))
        except wire.WireError as err:
            raise InfraError(f"a judge process did not start ({err})") from None
        wire.close(fds)
        self.pid = msg.get("ready")
        if not isinstance(self.pid, int):
            raise InfraError(f"a judge process did not start: {str(msg.get('error', msg))[:300]}")

    def run(self, job: Job, timeout: float) -> EvalResult:
        self.wait_ready()
        nonce = secrets.token_hex(8)
        try:
            wire.send(self.sock, {**job.to_dict(), "nonce": nonce})
            reply, fds = wire.recv(self.sock, _deadline((1 + GPU_TURNS) * timeout + JUDGE_MARGIN_S))
        except wire.WireError as err:
            raise InfraError(f"the judge process failed ({err})") from None
        wire.close(fds)
        if reply.get("nonce") != nonce:
            raise InfraError("the judge answered another job")
        try:
            return EvalResult.from_dict(reply["result"])
        except (KeyError, TypeError, ValueError) as err:
            raise InfraError(f"the judge answered something that is not a result: {reply.get('error', err)}") from None

    def kill(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # its candidates die with their lifelines
            except ProcessLookupError:
                pass
        self.sock.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def visible_gpus(count: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES names of this process's first `count` GPUs, to pin a child to one of them.

    A child's CUDA_VISIBLE_DEVICES names the machine's GPUs, not indices into the parent's list: a parent
    started with CUDA_VISIBLE_DEVICES=2,3 must hand its workers "2" and "3", not "0" and "1".
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in visible.split(",")] if visible else [str(i) for i in range(count)]
    return names[:count]


def worker_devices(num_workers: int | None, gpus: list[str]) -> list[str]:
    """The GPU of each worker slot: `num_workers` (default one per GPU) dealt round-robin over `gpus`."""
    if not gpus:
        return []
    return [gpus[i % len(gpus)] for i in range(num_workers or len(gpus))]


def timing_lock_path(gpu: str) -> str:
    """One lock file per physical GPU (its CUDA_VISIBLE_DEVICES name), shared by every pool on the machine."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu)
    return os.path.join(tempfile.gettempdir(), f"proxycomp-gym-timing-gpu{safe}.lock")


def gpu_turn(device) -> Callable[[], ContextManager]:
    """The policy's shared hold on the timing lock of its GPU (timing.DeviceLock) for a `torch.device`: the judges of
    every pool on the machine time no candidate while the policy samples or updates on that GPU."""
    import torch

    from .timing import DeviceLock

    if device.type != "cuda":
        return contextlib.nullcontext
    lock = DeviceLock(timing_lock_path(visible_gpus(torch.cuda.device_count())[device.index or 0]))

    @contextlib.contextmanager
    def turn():
        with lock.share():
            yield
            torch.cuda.synchronize(device)  # queued kernels (an optimizer step) finish before a timing may start

    return turn


class LocalPool:
    """N judge slots on this machine: with CUDA, `num_workers` (default one per GPU) spread over the GPUs, or one
    per entry of `devices` (CUDA_VISIBLE_DEVICES names, repeats allowed); else N CPU slots."""

    def __init__(self, num_workers: int | None = None, devices: list[str] | None = None) -> None:
        import torch

        if devices is None:
            devices = worker_devices(num_workers, visible_gpus(torch.cuda.device_count()))
        self.devices = devices
        self.num_workers = len(devices) if devices else (num_workers or 1)
        if self.num_workers < 1:
            raise ValueError(f"LocalPool(num_workers={num_workers}): need at least one worker")
        self.workdir = tempfile.mkdtemp(prefix="gym-pool-")
        self._idle: queue.Queue = queue.Queue()
        self._judges: dict[int, JudgeProcess | None] = {slot: None for slot in range(self.num_workers)}
        for slot in range(self.num_workers):
            self._idle.put(slot)
        self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="gym-slot")
        self._zygote = Zygote(self.workdir)
        self._zygote_lock = threading.Lock()

    def _spawn(self, slot: int) -> JudgeProcess:
        with self._zygote_lock:
            if not self._zygote.alive():  # an infrastructure fault: start a new fork server
                self._zygote.close()
                self._zygote = Zygote(self.workdir)
            zygote = self._zygote
        workdir = tempfile.mkdtemp(prefix=f"judge{slot}-", dir=self.workdir)
        gpu = self.devices[slot] if self.devices else ""
        share = 0.9 / self.devices.count(gpu) if gpu else 0.0  # of the GPU's memory, for this slot
        return JudgeProcess(zygote, workdir, gym_env(workdir, {"CUDA_VISIBLE_DEVICES": gpu}),
                            timing_lock_path(gpu) if gpu else None, "cuda" if gpu else "cpu", share)

    def _run_one(self, job: Job) -> EvalResult:
        config = job.config
        slot = self._idle.get()
        try:
            attempt = 0
            while True:
                attempt += 1
                judge = self._judges[slot]
                try:
                    if judge is None:
                        judge = self._judges[slot] = self._spawn(slot)
                    result = judge.run(job, config.timeout_s)
                except InfraError as exc:
                    if judge is not None:
                        judge.kill()
                    self._judges[slot] = None
                    if attempt > config.retries:
                        return EvalResult(id=job.id, task=job.task, status="infra_error", error=str(exc),
                                          attempts=attempt)
                    continue
                if result.status == "infra_error" and attempt <= config.retries:
                    continue
                if self.devices and result.status == "resource" and "device" in result.error and not job.alone:
                    job = dataclasses.replace(job, alone=True)  # never the candidate's fault while others share
                    continue  # the GPU: once more, with the GPU to itself
                result.attempts = attempt
                return result
        finally:
            self._idle.put(slot)

    def run(self, jobs: list[Job], on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """Results in job order. `on_result(index, result)` is called as each finishes, in finishing order."""
        futures = {self._executor.submit(self._run_one, job): i for i, job in enumerate(jobs)}
        results: list[EvalResult | None] = [None] * len(jobs)
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            if on_result is not None:
                on_result(i, results[i])
        return results

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for slot, judge in self._judges.items():
            if judge is not None:
                judge.kill()
            self._judges[slot] = None
        self._zygote.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
