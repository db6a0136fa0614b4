"""Worker processes and the local pool.

`WorkerProcess` is the parent's handle on one sandboxed worker (see worker.py), forked by the pool's
`Zygote` (see zygote.py) so that a new worker costs a fork, not a torch import. `LocalPool` runs jobs on
N slots: on GPUs one per GPU by default, or N spread over them round-robin, each pinned with
CUDA_VISIBLE_DEVICES (workers sharing a GPU take turns timing: timing.DeviceLock); else N CPU slots.
A worker is retired after any job that was not clean (failed, flagged, timed out, crashed) and after
`max_jobs_per_worker` clean ones; its replacement is forked right away. Only infrastructure faults (a worker
that cannot start or answers garbage) are retried; a candidate that crashes or hangs gets its own
"crashed"/"timeout" result.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import sandbox
from .worker import HEADER, send

STARTUP_TIMEOUT_S = 180.0
MAX_MESSAGE = 64 << 20


class InfraError(RuntimeError):
    """The gym failed (not the candidate): worth a retry."""


class Zygote:
    """The fork server (zygote.py) of one pool: started once, forks every worker."""

    def __init__(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="gym-zygote-")
        self.sock, child = socket.socketpair()
        with open(os.path.join(self.workdir, "zygote.log"), "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-m", "proxycomp.gym_bridge.zygote", str(child.fileno())],
                cwd=self.workdir, env=sandbox.scrubbed_env(self.workdir), pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        child.close()
        self._lock = threading.Lock()
        self._ready = False

    def fork(self, request: dict, fds: list[int]) -> None:
        with self._lock:
            if not self._ready:
                self.sock.settimeout(STARTUP_TIMEOUT_S)
                try:
                    ok = self.sock.recv(16) == b"ready\n"
                except OSError:
                    ok = False
                if not ok:
                    raise InfraError(f"gym zygote failed to start (exit {self.proc.poll()}): {self._log_tail()}")
                self.sock.settimeout(None)
                self._ready = True
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            except OSError as exc:
                raise InfraError(f"gym zygote is gone (exit {self.proc.poll()}): {exc}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _log_tail(self) -> str:
        with open(os.path.join(self.workdir, "zygote.log"), errors="replace") as fh:
            return "\n".join(fh.read().strip().splitlines()[-4:])

    def close(self) -> None:
        self.sock.close()  # the zygote exits on EOF
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


class WorkerProcess:
    """The parent's handle on one forked worker: job pipes plus the monitor's status pipe."""

    def __init__(self, zygote: Zygote, *, device_env: dict[str, str], memory_mb: int, cpu_s: int,
                 timing_lock: str | None = None) -> None:
        self.workdir = tempfile.mkdtemp(prefix="gym-worker-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self._status, status_w = os.pipe()
        request = {"workdir": self.workdir, "env": sandbox.scrubbed_env(self.workdir, device_env),
                   "memory_mb": memory_mb, "cpu_s": cpu_s, "timing_lock": timing_lock}
        try:
            zygote.fork(request, [to_child_r, from_child_w, status_w])
        finally:
            for fd in (to_child_r, from_child_w, status_w):
                os.close(fd)
        self._status_buf = b""
        self.pid = self.pgid = None
        self.ready = False
        self._closed = False
        self.jobs = 0

    def _status_msg(self, timeout: float) -> dict | None:
        """The monitor's next line ({"pid", "pgid"} then {"exit"}), or None on timeout or EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._status_buf:
            ready, _, _ = select.select([self._status], [], [], max(deadline - time.monotonic(), 0.0))
            chunk = os.read(self._status, 4096) if ready else b""
            if not chunk:
                return None
            self._status_buf += chunk
        line, self._status_buf = self._status_buf.split(b"\n", 1)
        return json.loads(line)

    def _read(self, timeout: float) -> dict | None:
        """The next message, or None when `timeout` passes first (also mid-message: a candidate could write
        a header promising bytes that never come). EOFError when the worker closed the pipe; ValueError
        for bytes that are not a message."""
        deadline = time.monotonic() + timeout
        buf = b""
        need = HEADER.size
        while len(buf) < need:
            ready, _, _ = select.select([self._from_child], [], [], max(deadline - time.monotonic(), 0.0))
            if not ready:
                return None
            chunk = os.read(self._from_child, min(need - len(buf), 1 << 20))
            if not chunk:
                raise EOFError
            buf += chunk
            if need == HEADER.size and len(buf) == HEADER.size:
                need += HEADER.unpack(buf)[0]
                if need > MAX_MESSAGE:
                    raise ValueError(f"message of {need} bytes")
        return json.loads(buf[HEADER.size:])

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        if self.ready:
            return
        started = self._status_msg(timeout)
        if started is None:
            raise InfraError("worker was not forked (no word from its monitor)")
        self.pid, self.pgid = started["pid"], started["pgid"]
        try:
            msg = self._read(timeout)
        except EOFError:
            msg = None
        if not msg or "ready" not in msg:
            raise InfraError(f"worker failed to start: {self.log_tail()}")
        self.ready = True

    def run(self, job: dict, timeout: float) -> dict:
        """The job's measurements, or a result dict with status timeout/crashed."""
        self.wait_ready()
        job = dict(job, nonce=secrets.token_hex(8))
        self.jobs += 1
        try:
            send(self._to_child, job)
        except BrokenPipeError:
            raise InfraError("worker pipe closed before the job was sent") from None
        try:
            msg = self._read(timeout)
        except ValueError:  # bytes on the pipe that are not our protocol: written by the candidate
            self.kill()
            return {"status": "flagged", "hacks": ["forged_result"], "error": "garbled message on the result pipe"}
        except EOFError:
            ended = self._status_msg(30.0) or {}
            code = ended.get("exit")
            how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
            return {"status": "crashed", "exit_code": code, "error": f"worker died ({how})\n{self.log_tail()}"}
        if msg is None:
            self.kill()
            return {"status": "timeout", "error": f"killed after the {timeout:g} s wall timeout"}
        if msg.get("nonce") != job["nonce"]:  # written to the pipe by the candidate, not the harness
            return {"status": "flagged", "hacks": ["forged_result"], "error": "message without the job nonce"}
        return msg

    def log_tail(self, lines: int = 4) -> str:
        try:
            with open(os.path.join(self.workdir, "worker.log"), errors="replace") as fh:
                return "\n".join(fh.read().strip().splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """Idempotent: the pipe fds are closed once, so a recycled fd number of another worker is safe.
        The worker is killed first so its monitor reaps it; then the whole session goes."""
        if self._closed:
            return
        self._closed = True
        if self.pid is not None:
            for kill, target in ((os.kill, self.pid), (os.killpg, self.pgid)):
                try:
                    kill(target, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if kill is os.kill:
                    self._status_msg(5.0)
        for fd in (self._to_child, self._from_child, self._status):
            os.close(fd)
        shutil.rmtree(self.workdir, ignore_errors=True)


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


def clean(result: dict) -> bool:
    """A job after which the worker may serve another one."""
    return ("status" not in result and not result.get("hacks") and not result.get("error")
            and result.get("correct", False))


class LocalPool:
    """N sandboxed worker processes on this machine: with CUDA, `num_workers` (default one per GPU) spread over
    the GPUs, or one per entry of `devices` (CUDA_VISIBLE_DEVICES names, repeats allowed)."""

    def __init__(self, num_workers: int | None = None, devices: list[str] | None = None) -> None:
        import torch

        if devices is None:
            devices = worker_devices(num_workers, visible_gpus(torch.cuda.device_count()))
        self.devices = devices
        self.num_workers = len(devices) if devices else (num_workers or 1)
        if self.num_workers < 1:
            raise ValueError(f"LocalPool(num_workers={num_workers}): need at least one worker")
        self._idle: queue.Queue = queue.Queue()
        self._workers: dict[int, WorkerProcess | None] = {slot: None for slot in range(self.num_workers)}
        for slot in range(self.num_workers):
            self._idle.put(slot)
        self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="gym-slot")
        self._zygote = Zygote()
        self._zygote_lock = threading.Lock()
        self._settings: tuple[int, int] | None = None

    def _device_env(self, slot: int) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.devices[slot]} if self.devices else {"CUDA_VISIBLE_DEVICES": ""}

    def _spawn(self, slot: int, config: dict) -> WorkerProcess:
        with self._zygote_lock:
            if not self._zygote.alive():  # an infrastructure fault: start a new fork server
                self._zygote.close()
                self._zygote = Zygote()
            zygote = self._zygote
        return WorkerProcess(zygote, device_env=self._device_env(slot), memory_mb=config["memory_limit_mb"],
                             cpu_s=config["cpu_limit_s"],
                             timing_lock=timing_lock_path(self.devices[slot]) if self.devices else None)

    def _worker(self, slot: int, config: dict) -> WorkerProcess:
        settings = (config["memory_limit_mb"], config["cpu_limit_s"])
        worker = self._workers[slot]
        if worker is not None and self._settings != settings:
            worker.kill()
            worker = None
        self._settings = settings
        if worker is None:
            worker = self._workers[slot] = self._spawn(slot, config)
        return worker

    def _run_one(self, job: dict) -> dict:
        config = job["config"]
        slot = self._idle.get()
        try:
            attempt = 0
            while True:
                attempt += 1
                worker = None
                try:
                    worker = self._worker(slot, config)
                    result = worker.run(job, config["timeout_s"])
                except InfraError as exc:
                    if worker is not None:
                        worker.kill()
                    self._workers[slot] = None
                    if attempt > config["retries"]:
                        return {"status": "infra_error", "error": str(exc), "attempts": attempt}
                    continue
                result["attempts"] = attempt
                if not clean(result) or worker.jobs >= config["max_jobs_per_worker"]:
                    worker.kill()
                    self._workers[slot] = None
                    try:  # fork the replacement now so it is ready when the slot's next job comes
                        self._workers[slot] = self._spawn(slot, config)
                    except InfraError:
                        pass  # retried lazily by the next job on this slot
                return result
        finally:
            self._idle.put(slot)

    def run(self, jobs: list[dict]) -> list[dict]:
        """Results in job order; each job dict carries its own config."""
        return list(self._executor.map(self._run_one, jobs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for slot, worker in self._workers.items():
            if worker is not None:
                worker.kill()
            self._workers[slot] = None
        self._zygote.close()
