"""The judge: the only code that decides, in a process that never imports a candidate's code.

A judge process (forked by the pool's zygote, one per worker slot, long-lived) takes a `Job` from the pool, asks the
zygote for a fresh candidate process, drives it (candidate.py) and answers with an `EvalResult`:

1. the task and its reference, built here from an initialization seed drawn per evaluation (the candidate builds
   ModelNew under the same seed, so weights match as in KernelBench);
2. the candidate's code, loaded in its process;
3. correctness: K calls on inputs that a secret per-evaluation seed stands for (the judge draws its copy, the
   candidate process its own, from the seed revealed in that call's request), each output compared here with the
   reference's on the judge's copy; the last call's tensors refilled (a cache keyed on them goes stale); a
   grad-mode call; every call must launch a Triton kernel;
4. on the GPU: the timing input sets staged in the candidate's process (beside others' checks), then, holding the
   device lock once: trials of the reference (here) and of the candidate (in its process) interleaved, each on
   inputs refilled from a seed revealed only in that trial, after the L2 is flushed from here, and after each
   candidate trial a null trial (the same request with the call left out, fingerprinting the same outputs).
   The candidate's time is this process's clock around its trial requests less the null trials' (floors of both);
   the time its process reports can only make it longer. Each trial's answer carries a fingerprint of the outputs
   under a key revealed in the same request, compared with the reference's: the whole output was computed inside
   the window that was timed. Then a few calls under the profiler give the coverage (the share of device time in
   the candidate's own @triton.jit kernels, by exact name), which can only lower the reward, and device work that
   no observed op explains, or a round trip through the host, is a verdict;
5. the verdicts and the reward; the candidate process is killed and its folder removed.
What the candidate process says of itself (launches, ops, types, mutation, refusals, its own timings, its profile)
can only add verdicts or lower the reward (reward.py, docs/gym.md).
"""
from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import math
import os
import secrets
import select
import shutil
import signal
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from . import wire
from .config import EvalConfig, Job
from .op_audit import GLUE_OPS
from .result import EvalResult
from .reward import finish
from .static_checks import parse_candidate
from .timing import DeviceLock, clock, draw_inputs, projection, projection_tolerance, refill, timed_call

OUTPUT_TAIL_BYTES = 2000
OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "out of memory", "OutOfMemoryError")
MAX_OUTPUT_FACTOR = 2  # a candidate's outputs may hold at most this many times the reference's bytes (+ 1 MiB)
PROFILE_SLACK = 1.5  # the profile's device time may exceed the profiled request's wall time by this factor at most
UNEXPLAINED_SHARE = 0.1  # device time in others' kernels with no compute op seen: above this share, a verdict
HOST_COPY_SHARE = 0.25  # device time copying between host and device: above this share, the work went through the host
HOST_COPIES = ("Memcpy HtoD", "Memcpy DtoH")  # the profiler's names for copies between host and device memory
GLUE_KERNELS = ("Memset", "Memcpy DtoD", "FillFunctor", "copy_kernel")  # what glue ops (zeros, copy_, ...) launch
MAX_TURNS = 1000  # turn messages in one request (each compile hands the GPU back once)
STARTUP_S = 120.0  # for a candidate process to start (fork, namespaces, device, profiler), before its own clock


class CandidateGone(Exception):
    """The candidate process stopped answering: it exited, crashed, hung or sent garbage."""

    def __init__(self, status: str, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.status, self.exit_code = status, exit_code


class NotStarted(Exception):
    """A candidate process that ended or fell silent before it said it was ready, before any candidate code reached
    it: the gym's failure (infra_error), never a verdict on the candidate."""


class Turn:
    """The check's shared hold on the GPU's timing lock, which the candidate process hands back while Triton compiles
    on the host (taking it again before it launches) and while a call's outputs are copied out (turn messages,
    candidate.Session.hand_back): a compile of a second keeps no timing of another slot waiting. A process that lies
    about it only lets other candidates' GPU work run beside its own request, which nobody times. `waited(seconds)`
    is told each wait."""

    def __init__(self, lock: DeviceLock, waited) -> None:
        self.lock, self.waited, self.held = lock, waited, False
        self.since, self.held_s, self.longest_s = 0.0, 0.0, 0.0  # how long others' timings could wait for it

    def take(self) -> None:
        if not self.held:
            self.waited(self.lock.take_shared())
            self.held, self.since = True, clock()

    def release(self) -> None:
        if self.held:
            self.lock.release()
            self.held = False
            spell = clock() - self.since
            self.held_s, self.longest_s = self.held_s + spell, max(self.longest_s, spell)


@dataclass
class CandidateProcess:
    """The judge's handle on one candidate process: its socket, the monitor's status pipe, the lifeline, and the
    read end of its report pipe (what its process refused or found changed: one verdict code a line)."""

    sock: socket.socket
    status: int
    lifeline: int
    report: int
    workdir: str
    deadline: float
    output: int = -1  # the judge's own descriptor of output.log: a file the candidate swaps or links is not read
    pid: int = 0
    turn: Turn | None = None  # the current request's shared hold on the GPU, which the process may hand back
    layers: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _status_buf: bytes = b""
    _report_buf: bytes = b""

    def ask(self, msg: dict, reply_bytes: int = 0) -> tuple[dict, int | None]:
        """Send a request (with a reply buffer of `reply_bytes` when the answer holds tensors); the reply and that
        buffer. Turn messages before the reply hand the request's shared hold on the GPU back and take it again
        (`Turn`). CandidateGone when the process does not answer in time."""
        reply_fd = wire.reply_buffer(reply_bytes) if reply_bytes else None
        try:
            wire.send(self.sock, msg, [reply_fd] if reply_fd is not None else [])
            for _ in range(MAX_TURNS + 1):
                reply, extra = wire.recv(self.sock, self.deadline)
                wire.close(extra)
                if reply.keys() != {"turn"} or reply["turn"] not in ("release", "take"):
                    break
                if self.turn is not None:
                    self.turn.release() if reply["turn"] == "release" else self.turn.take()
                if reply["turn"] == "take":
                    wire.send(self.sock, {"turn": "go"})
            else:
                raise wire.WireError(f"not a message (more than {MAX_TURNS} turn messages in one request)")
        except (wire.WireError, OSError) as err:
            wire.close([reply_fd])
            raise self._gone(str(err)) from None
        self.drain(replied=True)
        return reply, reply_fd

    def drain(self, replied: bool = False) -> None:
        """Read what the report pipe holds; a pipe closed by a process that still answers is itself a verdict."""
        while select.select([self.report], [], [], 0)[0]:
            chunk = os.read(self.report, 1 << 16)
            if not chunk:
                if replied:
                    self._note("audit_evasion:the report channel was closed")
                os.close(self.report)
                self.report = os.open(os.devnull, os.O_RDONLY | os.O_NONBLOCK)  # read as empty from now on
                return
            self._report_buf += chunk
            *lines, self._report_buf = self._report_buf.split(b"\n")
            for line in lines:
                self._note(line.decode(errors="replace"))

    def _note(self, code: str) -> None:
        if code and code not in self.violations and len(self.violations) < 40:
            self.violations.append(code[:300])

    def extend(self, seconds: float) -> None:
        """Time spent waiting for the GPU is not the candidate's: its deadline moves by as much."""
        self.deadline += seconds

    def _gone(self, why: str) -> CandidateGone:
        if why == "timeout":
            return CandidateGone("timeout", "killed after the wall timeout")
        ended = self.end()
        if ended is None or why.startswith("not a message"):
            return CandidateGone("error", f"the candidate process sent something that is not a reply ({why})")
        how = f"signal {signal.Signals(-ended).name}" if ended < 0 else f"exit code {ended}"
        tail = self.output_tail()
        return CandidateGone("crashed", f"the candidate process died ({how})" + (f"\n{tail}" if tail else ""), ended)

    def status_message(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._status_buf:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self.status], [], [], wait)[0]:
                return None
            chunk = os.read(self.status, 4096)
            if not chunk:
                return None
            self._status_buf += chunk
        line, self._status_buf = self._status_buf.split(b"\n", 1)
        return json.loads(line)

    def threads(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.pid}/task"))
        except OSError:
            return None

    def output_tail(self) -> str:
        """The end of what the process printed (read bounded, through the descriptor the judge opened on the file it
        made; the profiler's own start/stop lines left out)."""
        try:
            size = os.fstat(self.output).st_size
            start = max(0, size - 4 * OUTPUT_TAIL_BYTES)
            lines = os.pread(self.output, size - start, start).decode(errors="replace").splitlines()
        except OSError:
            return ""
        kept = [line for line in lines if "ActivityProfilerHandler" not in line]
        return "\n".join(kept).strip()[-OUTPUT_TAIL_BYTES:]

    def end(self) -> int | None:
        """Kill the process (closing the lifeline tells its monitor to); its exit code, None if unknown."""
        if self.lifeline >= 0:
            os.close(self.lifeline)
            self.lifeline = -1
        ended = self.status_message(30.0)
        self.drain()
        return None if ended is None else ended.get("exit")

    def close(self) -> None:
        self.end()
        self.sock.close()
        os.close(self.status)
        os.close(self.report)
        if self.output >= 0:
            os.close(self.output)
        shutil.rmtree(self.workdir, ignore_errors=True)


def triton_functions(code: str) -> set[str]:
    """Names of the functions the source decorates with triton.jit or triton.autotune/heuristics."""
    names = set()
    for node in ast.walk(parse_candidate(code)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if "jit" in text or "autotune" in text or "heuristics" in text:
                    names.add(node.name)
    return names


def tolerances(cfg: EvalConfig, task: ModuleType, ref: list) -> tuple[list[float], list[float]]:
    """(atol, rtol) of each reference output: per dtype, the task's own, or the config's override for all."""
    table = {**cfg.tolerances, **getattr(task, "TOLERANCES", {})}
    per = [table.get(str(r.dtype).removeprefix("torch."), 0.0) for r in ref]
    return ([cfg.atol if cfg.atol is not None else t for t in per],
            [cfg.rtol if cfg.rtol is not None else t for t in per])


def compare(out: list, ref: list, atol: list[float], rtol: list[float]) -> tuple[str, float | None]:
    """('' if `out` matches `ref` within tolerance else the mismatch, the max abs error where both are finite)."""
    if len(out) != len(ref):
        return f"returned {len(out)} outputs, expected {len(ref)}", None
    worst = 0.0
    for o, r, a, b in zip(out, ref, atol, rtol):
        if o.shape != r.shape or o.dtype != r.dtype:
            return f"output shape/dtype {tuple(o.shape)}/{o.dtype}, expected {tuple(r.shape)}/{r.dtype}", None
        if not r.numel():
            continue
        finite = torch.isfinite(r)
        lost = finite & ~torch.isfinite(o)
        if bool(lost.any()):
            return f"{int(lost.sum())} outputs are NaN or inf where the reference is finite", None
        diff = (o.double() - r.double()).abs()
        worst = max(worst, float(diff[finite].max()) if bool(finite.any()) else 0.0)
        if not bool(torch.isclose(o, r, rtol=b, atol=a, equal_nan=True).all()):
            return f"values differ (max abs error {worst:.3g}, atol {a:g}, rtol {b:g})", worst
    return "", worst


def compute_ops(names: dict[str, int] | list[str], extra_allowed: tuple[str, ...]) -> set[str]:
    allowed = GLUE_OPS | set(extra_allowed)
    return {n for n in names if n not in allowed and n.split(".")[0] not in allowed}


def device_verdict(kernels: dict[str, float], source: set[str], torch_ops: list[str]) -> str | None:
    """A verdict on a profile's device time (kernel name -> us): most of it copying between host and device (the
    values were computed where no instrument looks), or others' kernels that no compute op seen by any observer
    launched (the observers were silenced). Glue ops' kernels (fills, copies on the device) need no op to explain."""
    total = sum(kernels.values())
    host = sum(us for name, us in kernels.items() if name.startswith(HOST_COPIES))
    if total > 0 and host > HOST_COPY_SHARE * total:
        return f"host_compute:{100 * host / total:.0f}% of the device time copies to or from the host"
    others = {name: us for name, us in kernels.items() if name not in source and not name.startswith(HOST_COPIES)
              and not any(glue in name for glue in GLUE_KERNELS)}
    if not torch_ops and sum(others.values()) > UNEXPLAINED_SHARE * total:
        names = ",".join(sorted(others, key=others.get, reverse=True)[:3])
        return f"audit_evasion:device kernels that no observed op launched ({names[:200]})"
    return None


def judge_clock(walls: list[float], nulls: list[float]) -> tuple[float, float, float]:
    """(the call's time on the judge's clock, its uncertainty, the null cost subtracted), in ms: the fastest timed
    request less the fastest null trial. A null trial runs beside the trials and none of the candidate's code (the
    collector is off in it, and it fingerprints the outputs the trial before it made, so the rest of the request
    costs the same), so the difference is the call's. Noise only lengthens a request, so floors are steadier than
    medians; the uncertainty is how far each floor lies below its tenth percentile."""

    def above_floor(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=10)[0] - min(xs) if len(xs) > 1 else 0.0

    return min(walls) - min(nulls), above_floor(walls) + above_floor(nulls), min(nulls)


class Judge:
    """Judges jobs one at a time in this process; each candidate gets a process of its own from the zygote."""

    def __init__(self, zygote: socket.socket, config: dict) -> None:
        self.zygote = zygote
        self.device = config["device"]
        self.env = config["env"]
        self.root = config["workdir"]
        self.lock = DeviceLock(config["timing_lock"]) if config.get("timing_lock") else None
        # Judges sharing a GPU split its memory: each judge and its candidate get half of this slot's share, so a
        # candidate that runs out of memory ran out of its own (a retry alone then gets nearly all of it).
        self.gpu_share = config.get("gpu_share", 0.9)
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"CUDA_VISIBLE_DEVICES={self.env.get('CUDA_VISIBLE_DEVICES')!r} names no usable GPU "
                               f"on this machine")
        if self.device == "cuda":
            torch.cuda.set_per_process_memory_fraction(self.gpu_share / 2)
        self.triton_base = self._warm_up() if self.device == "cuda" else None
        self.tasks: dict[str, ModuleType] = {}
        self.spare: tuple[dict, CandidateProcess] | None = None  # the next job's process, started in advance
        self.flush: torch.Tensor | None = None
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references are true fp32
        torch.backends.cudnn.allow_tf32 = False

    def _warm_up(self) -> str:
        """Build Triton's launcher helpers once, in a cache every candidate gets a copy of."""
        import triton
        import triton.language as tl

        base = os.path.join(self.root, "triton_base")
        os.environ["TRITON_CACHE_DIR"] = base

        @triton.jit
        def _fill(ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(ptr + offs, 1.0, mask=offs < n)

        buf = torch.zeros(8, device="cuda")
        _fill[(1,)](buf, 8, BLOCK=16)
        torch.cuda.synchronize()
        return base

    # ---- one job --------------------------------------------------------------------------------------------
    def run(self, job: Job) -> EvalResult:
        cfg = job.config
        res = EvalResult(id=job.id, task=job.task, status="error", device=self.device)
        started = clock()
        cand = None
        try:
            task = self._task(job.task_source)
            with self._hold(cfg) if job.alone else _no_lock():
                cand = self._candidate(cfg, job.alone)
                _lap(res, "spawn", started)
                res.containment = cand.layers
                self._judge(task, job, cand, res)
        except CandidateGone as gone:
            res.status, res.error = gone.status, str(gone)
            res.exit_code = gone.exit_code
        except (TimeoutError, NotStarted) as exc:  # the device lock stayed taken, or no candidate process started:
            res.status, res.error = "infra_error", str(exc)  # the gym's fault, no verdict on the candidate
        except torch.cuda.OutOfMemoryError as exc:
            res.status, res.error = "resource", f"the judge ran out of device memory: {str(exc)[:300]}"
        finally:
            if cand is not None:
                cand.close()
                res.hacks = cand.violations + res.hacks
        res.stage_s["total"] = round(clock() - started, 4)
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return finish(res, cfg.weights)

    def close(self) -> None:
        if self.spare is not None:
            self.spare[1].close()
            self.spare = None

    def _task(self, source: str) -> ModuleType:
        """The task module (cached by source): the reference's code, trusted like the gym's own."""
        if source not in self.tasks:
            module = ModuleType(f"gym_task_{len(self.tasks)}")
            path = os.path.join(self.root, f"task_{len(self.tasks)}.py")
            with open(path, "w") as fh:
                fh.write(source)
            exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the task file, not a candidate
            self.tasks[source] = module
        return self.tasks[source]

    def _candidate(self, cfg: EvalConfig, alone: bool) -> CandidateProcess:
        """A fresh candidate process for this job: the spare forked during the last job when it was made for the same
        settings and started, else a new one; then the next job's spare is forked, to start (CUDA, the profiler)
        while this one is judged. A spare that failed to start is the gym's loss, never the candidate's; a new process
        that fails too is the gym's failure (NotStarted: infra_error)."""
        request = self._request(cfg, alone)
        spare, self.spare = self.spare, None
        cand = None
        if spare is not None and spare[0] == request:
            with contextlib.suppress(NotStarted):  # then closed already
                cand = self._started(spare[1], cfg)
        elif spare is not None:
            spare[1].close()
        if cand is None:
            cand = self._started(self._fork(request, cfg), cfg)
        if not alone:  # a job alone holds the GPU: the next spare's start waits for it, so fork it after
            self.spare = (request, self._fork(request, cfg))
        return cand

    def _request(self, cfg: EvalConfig, alone: bool) -> dict:
        """What a candidate process is started with, but its folder."""
        return {"env": self.env, "device": self.device, "memory_mb": cfg.memory_limit_mb, "cpu_s": cfg.cpu_limit_s,
                "extra_allowed_ops": list(cfg.extra_allowed_ops), "triton_base": self.triton_base,
                "timing_lock": self.lock.path if self.lock and not alone else None,  # alone: this judge holds it
                "gpu_fraction": 0.9 if alone else self.gpu_share / 2}

    def _fork(self, request: dict, cfg: EvalConfig) -> CandidateProcess:
        """Ask the zygote for a candidate process (it starts on its own; `_started` waits for it)."""
        workdir = tempfile.mkdtemp(prefix="candidate-", dir=self.root)
        output = os.open(os.path.join(workdir, "output.log"), os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         0o600)
        mine, theirs = wire.pair()
        status_r, status_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        report_r, report_w = os.pipe()
        fcntl.fcntl(report_w, fcntl.F_SETFL, os.O_NONBLOCK)  # a full pipe ends the candidate, never blocks it
        own = {"TRITON_CACHE_DIR": os.path.join(workdir, "triton_cache"), "HOME": workdir, "TMPDIR": workdir}
        try:
            socket.send_fds(self.zygote, [json.dumps({**request, "workdir": workdir,
                                                      "env": {**request["env"], **own}}).encode()],
                            [theirs.fileno(), status_w, lifeline_r, report_w])
        finally:
            theirs.close()
            for fd in (status_w, lifeline_r, report_w):
                os.close(fd)
        return CandidateProcess(mine, status_r, lifeline_w, report_r, workdir, deadline=math.inf,  # set by _started
                                output=output)

    def _started(self, cand: CandidateProcess, cfg: EvalConfig) -> CandidateProcess:
        """Wait until `cand` is ready (a spare forked a long job ago may be: its start is awaited from now); its
        candidate's clock starts after."""
        cand.deadline = time.monotonic() + STARTUP_S
        try:
            started = cand.status_message(STARTUP_S)
            if started is None:
                raise NotStarted(f"the zygote did not fork a candidate process within {STARTUP_S:g} s")
            cand.pid = started["pid"]
            cand.layers = self._ready(cand).get("layers", [])
        except CandidateGone as gone:
            cand.close()
            raise NotStarted(f"a candidate process ended before it was ready ({gone})") from None
        except BaseException:
            cand.close()
            raise
        cand.deadline = time.monotonic() + cfg.timeout_s
        return cand

    @staticmethod
    def _ready(cand: CandidateProcess) -> dict:
        """Ask the process whether it is ready, as the job takes it: an answer given at its start would vouch for a
        spare that died since (killed while it waited), and the job's first request would find it gone."""
        try:
            wire.send(cand.sock, {"op": "ready"})
            msg, fds = wire.recv(cand.sock, cand.deadline)
        except (wire.WireError, OSError) as err:
            raise cand._gone(str(err)) from None
        wire.close(fds)
        if not msg.get("ready"):
            raise CandidateGone("error", "the candidate process did not start")
        return msg

    def _hold(self, cfg: EvalConfig):
        """The GPU's lock held exclusively (timing and profiling, or a retry that must run alone), yielding the
        seconds waited; the check's hold is shared (`_share`)."""
        return self.lock.hold(timeout_s=cfg.timeout_s) if self.lock is not None else _no_lock()

    def _judge(self, task: ModuleType, job: Job, cand: CandidateProcess, res: EvalResult) -> None:
        cfg, dev = job.config, self.device
        fixed = cfg.seed
        init_seed, input_seed = ((fixed, fixed + 1) if fixed is not None
                                 else (secrets.randbits(31), secrets.randbits(31)))
        lap = clock()
        baseline_threads = cand.threads()

        def note_wait(seconds: float) -> None:  # the time spent waiting for the GPU is not the candidate's
            cand.extend(seconds)
            res.stage_s["share_wait"] = round(res.stage_s.get("share_wait", 0.0) + seconds, 4)

        with self._share(cand, note_wait, job.alone, res.stage_s):
            init = draw_inputs(task, cfg.size, init_seed, dev, "get_init_inputs")
            torch.manual_seed(init_seed)
            ref = task.Model(*init).to(dev).eval()
            if not self._check(task, job, cand, res, ref, init_seed, input_seed, baseline_threads):
                return
            bench = Bench(self, task, job, cand, ref, input_seed) if dev == "cuda" else None
        lap = _lap(res, "check", lap)
        if bench is None:
            return
        with _no_lock() if job.alone else self._hold(cfg) as waited:  # alone: held since the start
            cand.extend(waited)
            res.stage_s["lock_wait"] = round(waited, 4)
            bench.measure(res)
        _lap(res, "time", lap)

    @contextlib.contextmanager
    def _share(self, cand: CandidateProcess, note_wait, alone: bool, stages: dict):
        """The check's shared hold on the GPU (load, correctness calls, staging), which goes back while the candidate
        process compiles and while each call's outputs are copied out and in (`Turn`): a timing of another slot
        waits for a stretch of GPU work, never for a compile or a copy."""
        if alone or self.lock is None:  # a job alone holds the GPU already
            yield
            return
        cand.turn = Turn(self.lock, note_wait)
        try:
            cand.turn.take()
            yield
        finally:
            turn, cand.turn = cand.turn, None
            turn.release()
            stages["share_held"], stages["share_longest"] = round(turn.held_s, 4), round(turn.longest_s, 4)

    def _check(self, task: ModuleType, job: Job, cand: CandidateProcess, res: EvalResult, ref: Any,
               init_seed: int, input_seed: int, baseline_threads: int | None) -> bool:
        """Load and correctness; True when the candidate is correct so far."""
        cfg, size = job.config, job.config.size
        lap = clock()
        reply, _ = cand.ask({"op": "load", "code": job.code, "task_source": job.task_source, "size": size,
                             "init_seed": init_seed})
        if "error" in reply:
            self._failed(reply, res)
            return False
        res.compiled = True
        _lap(res, "load", lap)
        for trial in range(cfg.correct_trials + 2):  # then the last call's tensors refilled, then grad mode
            if not self._correct_call(task, cfg, cand, res, ref, input_seed, trial):
                return False
        threads = cand.threads()
        if baseline_threads and threads and threads > baseline_threads:
            res.hacks.append(f"concurrency:threads {baseline_threads}->{threads}")
            return False
        if cfg.strict and res.torch_ops:
            res.hacks.append("torch_compute:" + ",".join(res.torch_ops))
            return False
        res.status = "ok"
        return True

    def _correct_call(self, task: ModuleType, cfg: EvalConfig, cand: CandidateProcess, res: EvalResult, ref: Any,
                      input_seed: int, trial: int) -> bool:
        """One correctness call (the `correct_trials` first, then the last call's tensors refilled, so that a cache
        keyed on them goes stale, then grad mode), compared here; False after a verdict."""
        calls = cfg.correct_trials
        grad, refilled = trial == calls + 1, trial == calls
        inputs = draw_inputs(task, cfg.size, input_seed + trial, self.device)
        with torch.no_grad():
            expected = _flat(ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
        atol, rtol = tolerances(cfg, task, expected)
        reply, outputs = self._call(cand, input_seed + trial, grad, expected, refilled)
        self._observe(reply, grad, cfg, res)
        if "error" in reply:
            self._failed(reply, res)
            return False
        if res.hacks or cand.violations:
            return False
        if outputs is None:
            res.status = "incorrect"
            res.error = f"trial {trial}: {reply.get('mismatch', 'an output is not a plain tensor')}"
            return False
        mismatch, err = compare(outputs, expected, atol, rtol)
        res.max_abs_err = err if err is None else max(err, res.max_abs_err or 0.0)
        if refilled and mismatch:
            res.hacks.append("output_cache")  # right on fresh tensors, stale on refilled ones
            return False
        if trial < calls:
            res.trials = trial + 1
        if mismatch:
            res.status = "incorrect"
            res.error = f"{'grad-mode call' if grad else f'trial {trial}'}: {mismatch}"
            return False
        if trial < calls:
            res.trials_passed = trial + 1
        return True

    def _call(self, cand: CandidateProcess, seed: int, grad: bool, expected: list,
              refilled: bool) -> tuple[dict, list | None]:
        budget = MAX_OUTPUT_FACTOR * wire.nbytes(expected) + (1 << 20)
        reply, fd = cand.ask({"op": "call", "seed": seed, "grad": grad, "refill": refilled}, reply_bytes=budget)
        try:
            if "error" in reply or "outputs" not in reply:
                return reply, None
            try:  # with the hold given back while the outputs were copied out, copied in likewise
                return reply, wire.decode(reply["outputs"], fd, budget, self.device)
            except wire.WireError as err:
                return {**reply, "mismatch": f"unusable outputs ({err})"}, None
        finally:
            wire.close([fd])
            if cand.turn is not None:
                cand.turn.take()  # the comparison computes on the GPU

    @staticmethod
    def _observe(reply: dict, grad: bool, cfg: EvalConfig, res: EvalResult) -> None:
        """Verdicts from what the candidate process reports of a call (each can only count against it)."""
        if reply.get("exit_call"):
            res.hacks.append("exit_call:SystemExit")
        if "error" in reply:
            return
        for kind in reply.get("types", []):
            if kind != "torch.Tensor":
                res.hacks.append(f"output_type:{kind} (must be exactly torch.Tensor)")
        if reply.get("mutated"):
            res.hacks.append("input_mutation")
        launches = [str(n) for n in reply.get("launches", [])]
        res.launched_kernels = sorted(set(res.launched_kernels) | set(launches))
        if not launches:
            res.hacks.append(f"decoy:no triton launch under {'grad' if grad else 'no-grad'}")
        extra = tuple(cfg.extra_allowed_ops)
        seen, audited = compute_ops(reply.get("ops", {}), extra), compute_ops(reply.get("audit_ops", []), extra)
        if seen and not audited:  # the profiler saw torch compute that the dispatch audit was kept from seeing
            res.hacks.append("audit_evasion:" + ",".join(sorted(seen)[:8]))
        res.torch_ops = sorted(set(res.torch_ops) | seen | audited)
        late = compute_ops(reply.get("late_ops", {}), extra)
        if late:  # the output was finished by what the harness did to it, after the call had returned
            res.hacks.append("late_compute:" + ",".join(sorted(late)[:8]))

    @staticmethod
    def _failed(reply: dict, res: EvalResult) -> None:
        res.error = str(reply.get("error", ""))[:4000]
        if reply.get("exit_call"):
            res.hacks.append("exit_call:SystemExit")
        if any(sign in res.error for sign in OUT_OF_MEMORY):
            res.status = "resource"
            where = "device" if "CUDA" in res.error else "host"
            res.error = f"{where} memory limit exceeded: " + res.error


class Bench:
    """The timing of one candidate against its reference on the GPU: the same procedure on both sides, trials
    interleaved, the candidate's measured on the judge's clock (module docstring, step 4)."""

    def __init__(self, judge: Judge, task: ModuleType, job: Job, cand: CandidateProcess, ref: Any,
                 input_seed: int) -> None:
        self.judge, self.task, self.job, self.cand, self.ref = judge, task, job, cand, ref
        cfg = job.config
        self.size, self.dev = cfg.size, judge.device
        seeds = [input_seed + 100 + k for k in range(max(1, cfg.input_sets))]
        self.sets = [draw_inputs(task, self.size, s, self.dev) for s in seeds]  # the reference's own copies
        with torch.no_grad():
            outputs = _flat(ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in self.sets[0]]))
        self.atol, self.rtol = tolerances(cfg, task, outputs)
        if judge.flush is None or judge.flush.numel() != cfg.l2_flush_mb << 18:
            judge.flush = torch.empty(cfg.l2_flush_mb << 18, dtype=torch.int32, device="cuda") \
                if cfg.l2_flush_mb else None
        reply, _ = cand.ask({"op": "stage", "task_source": job.task_source, "size": self.size, "seeds": seeds})
        if "error" in reply:
            raise CandidateGone("error", f"staging the timing inputs failed: {reply['error'][:500]}")  # after its load
        self.host_ms: list[float] = []

    def _flush(self) -> None:
        if self.judge.flush is not None:
            self.judge.flush.zero_()
        torch.cuda.synchronize()

    def _trial(self, k: int, null: bool = False) -> tuple[float, float, float, int, int]:
        """One candidate trial: (reported ms, the judge's ms around the request, fingerprint, seed, key); the host
        time the process reports for its call is kept for the record (`timing_check`), never used."""
        seed, key = secrets.randbits(31), secrets.randbits(31)
        self._flush()
        sent = time.perf_counter()
        reply, _ = self.cand.ask({"op": "trial", "set": k, "seed": seed, "key": key, "null": null})
        wall = (time.perf_counter() - sent) * 1e3
        if "error" in reply:
            raise CandidateGone("error", str(reply["error"])[:4000])
        ms, fingerprint = reply.get("ms"), reply.get("fingerprint")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (ms, fingerprint)) or ms < 0:
            raise CandidateGone("error", f"a timing reply without a time and a fingerprint: {str(reply)[:200]}")
        host = reply.get("host_ms")
        if not null and isinstance(host, (int, float)) and math.isfinite(host):
            self.host_ms.append(float(host))
        return float(ms), wall, float(fingerprint), seed, key

    def _reference(self, fn: Any, k: int, seed: int, key: int | None) -> tuple[float, float, float]:
        """The same trial of `fn` here: (ms, its fingerprint under `key`, the fingerprint's tolerance)."""
        inputs = self.sets[k]
        self._flush()
        refill(inputs, draw_inputs(self.task, self.size, seed, self.dev))
        torch.cuda.synchronize()
        ms, out = timed_call(fn, inputs, torch.cuda.Event, torch.cuda.synchronize)
        if key is None:
            return ms, 0.0, 0.0
        outputs = _flat(out)
        fingerprint, weights = projection(outputs, key, self.dev)
        return ms, fingerprint, projection_tolerance(outputs, weights, self.atol, self.rtol)

    def measure(self, res: EvalResult) -> None:
        cfg = self.job.config
        timed = self._timed(res)
        if timed is None:
            return
        if timed[0] > 0 and timed[1] / timed[0] > cfg.suspicious_speedup:  # measure again; keep the less flattering
            again = self._timed(res)
            if again is None:
                return
            if again[1] / again[0] < timed[1] / timed[0]:
                timed = again
        kernel_ms, ref_ms, iqr, check = timed
        res.timing_available, res.kernel_ms, res.ref_ms, res.kernel_iqr_ms = True, kernel_ms, ref_ms, iqr
        res.speedup, res.timing_check = ref_ms / kernel_ms, check
        profiled = clock()
        res.coverage = self._coverage(res)
        _lap(res, "profile", profiled)
        if cfg.compile_reference:
            compiled = torch.compile(self.ref)
            res.ref_compile_ms = statistics.median(
                self._reference(compiled, i % len(self.sets), secrets.randbits(31), None)[0]
                for i in range(cfg.warmup + cfg.timing_trials))

    def _timed(self, res: EvalResult) -> tuple[float, float, float, dict] | None:
        """(credited kernel ms, reference ms, IQR of the judge's per-trial ms, the clock check), or None after a
        verdict. Reference and candidate trials alternate, on the same seeds."""
        cfg = self.job.config
        reported, walls, ref_times, nulls = [], [], [], []
        self.host_ms = []
        for i in range(cfg.warmup + cfg.timing_trials):
            k = i % len(self.sets)
            ms, wall, fingerprint, seed, key = self._trial(k)
            ref_ms, expected, tolerance = self._reference(self.ref, k, seed, key)
            if math.isfinite(expected) and not abs(fingerprint - expected) <= tolerance:
                res.hacks.append("output_cache")  # a timed call's output is not the one its own inputs give
                res.status, res.error = "incorrect", (f"timed trial {i}: the outputs' fingerprint is off by "
                                                      f"{abs(fingerprint - expected):.3g} (tolerance {tolerance:.3g})")
                return None
            null_wall = self._trial(k, null=True)[1]
            if i >= cfg.warmup:
                reported.append(ms)
                walls.append(wall)
                ref_times.append(ref_ms)
                nulls.append(null_wall)
        judged, margin, null = judge_clock(walls, nulls)
        event = statistics.median(reported)
        credited = max(event, judged - margin)  # what the candidate's process reports can only lengthen it
        check = {"reported_ms": round(event, 5), "judge_ms": round(judged, 5), "margin_ms": round(margin, 5),
                 "null_ms": round(null, 5), "credited_ms": round(credited, 5),
                 "reported_host_ms": round(statistics.median(self.host_ms[cfg.warmup:] or [0.0]), 5)}
        per_trial = [w - null for w in walls]
        q = statistics.quantiles(per_trial, n=4) if len(per_trial) > 1 else [per_trial[0]] * 3
        return max(credited, 1e-6), statistics.median(ref_times), q[2] - q[0], check

    def _coverage(self, res: EvalResult) -> float | None:
        """Share of the profiled calls' device time in kernels named exactly as the source's @triton.jit functions
        (the candidate process's claim: it can lower the reward only); None after a verdict."""
        cfg = self.job.config
        sent = time.perf_counter()
        profile, _ = self.cand.ask({"op": "profile", "set": 0, "calls": cfg.profile_calls})
        wall_us = (time.perf_counter() - sent) * 1e6
        if "error" in profile:
            raise CandidateGone("error", str(profile["error"])[:4000])
        kernels = {str(k): float(v) for k, v in profile.get("kernels", {}).items()
                   if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0}
        total = sum(kernels.values())
        if total > PROFILE_SLACK * wall_us + 1000:  # the profile claims more device time than the calls took
            res.hacks.append("timing_forgery:profile")
            return None
        source = triton_functions(self.job.code)
        mine = sum(us for name, us in kernels.items() if name in source)
        if mine <= 0:
            res.hacks.append("decoy:no triton kernel in the profiled calls")
            return None
        res.torch_ops = sorted(set(res.torch_ops) | compute_ops(profile.get("ops", {}), tuple(cfg.extra_allowed_ops)))
        verdict = device_verdict(kernels, source, res.torch_ops)
        if verdict:
            res.hacks.append(verdict)
            return None
        return mine / total


class _no_lock:
    def __enter__(self) -> float:
        return 0.0

    def __exit__(self, *exc) -> None:
        return None


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _lap(res: EvalResult, stage: str, since: float) -> float:
    now = clock()
    res.stage_s[stage] = round(now - since, 4)
    return now


def serve(pool: socket.socket, zygote: socket.socket, config: dict) -> None:
    """Answer the pool's jobs until it closes the socket (run in a judge process forked by the zygote)."""
    import ctypes

    # Not dumpable: without CAP_SYS_PTRACE no process can read this one's memory (/proc/PID/mem) or attach to it,
    # whatever uid it runs as; a candidate has no capability at all (containment.py).
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    try:
        judge = Judge(zygote, config)
    except Exception as exc:  # noqa: BLE001 - told to the pool, which reports it instead of a closed socket
        wire.send(pool, {"error": f"{type(exc).__name__}: {exc}"})
        return
    wire.send(pool, {"ready": os.getpid(), "device": judge.device})
    while True:
        try:
            msg, fds = wire.recv(pool, deadline=float("inf"))
        except wire.WireError:
            judge.close()
            return
        wire.close(fds)
        nonce = msg.pop("nonce", None)
        try:
            job = Job.from_dict(msg)
        except (TypeError, ValueError) as exc:
            wire.send(pool, {"nonce": nonce, "error": f"not a job: {exc}"[:500]})
            continue
        try:
            result = judge.run(job)
        except Exception as exc:  # noqa: BLE001 - the gym failed, not the candidate: the pool retries
            result = EvalResult(id=job.id, task=job.task, status="infra_error", device=judge.device,
                                error=one_line(exc))
        wire.send(pool, {"nonce": nonce, "result": _finite(result.to_dict())})


def one_line(exc: BaseException) -> str:
    """An exception as its type, message and the line that raised it: what a user needs, not a traceback."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = f" ({os.path.basename(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno})" if frame else ""
    return f"{type(exc).__name__}: {str(exc)[:500]}{where}"


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
