"""The judge: the only code that decides, in a process that never imports a candidate's code.

A judge process (forked by the pool's zygote, one per worker slot, long-lived) takes a job from the pool, asks the
zygote for a fresh candidate process, and drives it (candidate.py) through:

1. the task and its reference, built here from an initialization seed drawn per evaluation (the candidate builds
   ModelNew under the same seed, so weights match as in KernelBench);
2. on the GPU, a calibration before the candidate's code exists: no-op timing trials whose round trips on the
   judge's clock measure what the process adds around a timed call;
3. the candidate's code, loaded in its process;
4. correctness: K calls on inputs drawn here from a secret per-evaluation seed (the candidate cannot precompute
   them), each compared here with the reference's outputs on a private copy of the same inputs; a grad-mode call
   compared the same way; every call must launch a Triton kernel;
5. on the GPU, timing under the device lock: each trial refills the inputs from a seed revealed only in that trial's
   request; the judge's clock brackets every request, so the time the candidate process reports for a call can be
   at most the round trip less the calibrated overhead (a forged, shorter time is flagged and never credited), the
   last outputs of the timed calls are checked against the reference, and the profiler's view of those very calls
   gives the Triton coverage (0: a decoy), its Triton kernels restricted to the @triton.jit functions of the source;
   the reference is then timed here by the same trial procedure;
6. the verdicts; the candidate process is killed and its folder removed.
What the candidate process says of itself (launches, ops, types, mutation, refusals) can only add verdicts: a forged
claim cannot raise a reward except through the coverage it reports, which the clock and the source bound.
"""
from __future__ import annotations

import ast
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
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from . import wire
from .op_audit import GLUE_OPS
from .timing import DeviceLock, clock, draw_inputs, timed_trial

CALIBRATION_TRIALS = 8
OUTPUT_TAIL_BYTES = 2000
OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "out of memory", "OutOfMemoryError")
MAX_OUTPUT_FACTOR = 2  # a candidate's outputs may hold at most this many times the reference's bytes (+ 1 MiB)


class CandidateGone(Exception):
    """The candidate process stopped answering: it exited, crashed, hung or sent garbage."""

    def __init__(self, status: str, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.status, self.exit_code = status, exit_code


@dataclass
class CandidateProcess:
    """The judge's handle on one candidate process: its socket, the monitor's status pipe, the lifeline."""

    sock: socket.socket
    status: int
    lifeline: int
    workdir: str
    deadline: float
    pid: int = 0
    layers: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # what the process refused or found patched, every reply
    _status_buf: bytes = b""

    def ask(self, msg: dict, tensors=()) -> tuple[dict, int | None]:
        """Send a request; its reply (and memfd). CandidateGone when the process does not answer in time."""
        try:
            wire.send(self.sock, msg, tensors)
            reply, fd = wire.recv(self.sock, self.deadline)
        except (wire.WireError, OSError) as err:
            raise self._gone(str(err)) from None
        found = reply.get("violations", [])
        if isinstance(found, list):
            self.violations += [str(v)[:200] for v in found[:20] if str(v) not in self.violations]
        return reply, fd

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
        """The end of what the process printed (read bounded; the profiler's own start/stop lines left out)."""
        try:
            with open(os.path.join(self.workdir, "output.log"), "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4 * OUTPUT_TAIL_BYTES))
                lines = fh.read().decode(errors="replace").splitlines()
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
        return None if ended is None else ended.get("exit")

    def close(self) -> None:
        self.end()
        self.sock.close()
        os.close(self.status)
        shutil.rmtree(self.workdir, ignore_errors=True)


def triton_functions(code: str) -> set[str]:
    """Names of the functions the source decorates with triton.jit or triton.autotune/heuristics."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if "jit" in text or "autotune" in text or "heuristics" in text:
                    names.add(node.name)
    return names


def compare(out: list, ref: list, tolerance: dict[str, float], atol: float | None, rtol: float | None) -> tuple[str, float | None]:
    """('' if `out` matches `ref` within tolerance else the mismatch, the max abs error where both are finite)."""
    if len(out) != len(ref):
        return f"returned {len(out)} outputs, expected {len(ref)}", None
    worst = 0.0
    for o, r in zip(out, ref):
        if o.shape != r.shape or o.dtype != r.dtype:
            return f"output shape/dtype {tuple(o.shape)}/{o.dtype}, expected {tuple(r.shape)}/{r.dtype}", None
        if not r.numel():
            continue
        tol = tolerance.get(str(r.dtype).removeprefix("torch."), 0.0)
        a, b = (atol if atol is not None else tol), (rtol if rtol is not None else tol)
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
    def run(self, job: dict) -> dict:
        cfg = job["config"]
        res: dict[str, Any] = {"compiled": False, "hacks": [], "error": "", "trials": 0, "trials_passed": 0,
                               "device": self.device, "timing_available": False, "launched_kernels": [],
                               "stage_s": {}, "torch_ops": []}
        started = clock()
        cand = None
        alone = bool(cfg.get("alone"))  # a retry after the device ran out of memory: no other job on the GPU
        # Each phase takes the GPU's lock as it needs it; a job that must run alone holds it all along instead.
        turn = (lambda exclusive: _no_lock()) if alone else (lambda exclusive: self._turn(cfg, exclusive))
        try:
            task = self._task(job["task_source"])
            with self._turn(cfg, exclusive=True) if alone else _no_lock():
                cand = self._spawn(cfg, alone)
                res["containment"] = cand.layers
                timing = self._judge(task, job, cand, res, turn)
                if timing is not None:
                    with turn(True) as waited:
                        res["stage_s"]["lock_wait"] = round(waited, 4)
                        self._time(task, job, cand, *timing, res)
        except CandidateGone as gone:
            res.update(status=gone.status, error=str(gone))
            if gone.exit_code is not None:
                res["exit_code"] = gone.exit_code
        except TimeoutError as exc:  # the device lock stayed taken: the gym's fault, no verdict on the candidate
            res.update(status="infra_error", error=str(exc))
        except torch.cuda.OutOfMemoryError as exc:
            res.update(status="resource", error=f"the judge ran out of device memory: {str(exc)[:300]}")
        finally:
            if cand is not None:
                res["hacks"] = cand.violations + res["hacks"]
                cand.close()
        res["hacks"] = list(dict.fromkeys(res["hacks"]))
        if res.get("status") == "resource" and self.device == "cuda" and "device" in res["error"] and not alone:
            res["retry_alone"] = True  # never the candidate's fault while others share the GPU: once more, alone
        res["stage_s"]["total"] = round(clock() - started, 4)
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return res

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

    def _spawn(self, cfg: dict, alone: bool) -> CandidateProcess:
        workdir = tempfile.mkdtemp(prefix="candidate-", dir=self.root)
        mine, theirs = wire.pair()
        status_r, status_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()
        request = {"workdir": workdir, "env": {**self.env, "TRITON_CACHE_DIR": os.path.join(workdir, "triton_cache"),
                                               "HOME": workdir, "TMPDIR": workdir},
                   "device": self.device, "memory_mb": cfg["memory_limit_mb"], "cpu_s": cfg["cpu_limit_s"],
                   "flush_mb": cfg["l2_flush_mb"], "extra_allowed_ops": list(cfg["extra_allowed_ops"]),
                   "triton_base": self.triton_base, "gpu_fraction": 0.9 if alone else self.gpu_share / 2}
        try:
            socket.send_fds(self.zygote, [json.dumps(request).encode()], [theirs.fileno(), status_w, lifeline_r])
        finally:
            theirs.close()
            os.close(status_w)
            os.close(lifeline_r)
        cand = CandidateProcess(mine, status_r, lifeline_w, workdir, deadline=time.monotonic() + cfg["timeout_s"])
        started = cand.status_message(60.0)
        if started is None:
            cand.close()
            raise TimeoutError("the zygote did not fork a candidate process within 60 s")
        cand.pid = started["pid"]
        cand.layers = self._ready(cand).get("layers", [])
        return cand

    @staticmethod
    def _ready(cand: CandidateProcess) -> dict:
        try:
            msg, fd = wire.recv(cand.sock, cand.deadline)
        except wire.WireError as err:
            raise cand._gone(str(err)) from None
        _close(fd)
        if not msg.get("ready"):
            raise CandidateGone("error", "the candidate process did not start")
        return msg

    def _judge(self, task: ModuleType, job: dict, cand: CandidateProcess, res: dict, turn) -> tuple | None:
        """Calibration (GPU), load and correctness; what timing needs when it is due (GPU, correct), else None.
        `turn(exclusive)` takes the GPU's lock for a phase."""
        cfg = job["config"]
        size, dev = cfg["size"], self.device
        fixed = cfg.get("seed")
        init_seed, input_seed = (fixed, fixed + 1) if fixed is not None else (secrets.randbits(31), secrets.randbits(31))
        lap = clock()
        init = draw_inputs(task, size, init_seed, dev, "get_init_inputs")
        torch.manual_seed(init_seed)
        ref = task.Model(*init).to(dev).eval()
        baseline_threads = cand.threads()
        calibration: list[float] = []
        if dev == "cuda":  # before the candidate's code exists in its process, and with the GPU to itself
            with turn(True):
                calibration = self._calibrate(cand, task, job, input_seed)
        with turn(False):
            return self._check(task, job, cand, res, ref, init, init_seed, input_seed, baseline_threads, calibration,
                               lap)

    def _check(self, task: ModuleType, job: dict, cand: CandidateProcess, res: dict, ref: Any, init: list,
               init_seed: int, input_seed: int, baseline_threads: int | None, calibration: list[float],
               lap: float) -> tuple | None:
        cfg = job["config"]
        size, dev = cfg["size"], self.device
        items, tensors = wire.encode(init)
        reply, fd = cand.ask({"op": "load", "code": job["candidate_code"], "init": items, "init_seed": init_seed,
                              "max_bytes": _nbytes(tensors)}, tensors)
        _close(fd)
        if "error" in reply:
            self._failed(reply, res)
            return None
        res["compiled"] = True
        lap = _lap(res, "load", lap)

        tolerance = {**cfg["tolerances"], **getattr(task, "TOLERANCES", {})}
        calls = cfg["correct_trials"]
        for trial in range(calls + 2):  # then the last call's tensors refilled (a cache goes stale), then grad mode
            grad, refill = trial == calls + 1, trial == calls
            inputs = draw_inputs(task, size, input_seed + trial, dev)
            with torch.no_grad():
                expected = _flat(ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            reply, outputs = self._call(cand, inputs, grad, expected, refill)
            self._observe(reply, grad, cfg, res)
            if "error" in reply:
                self._failed(reply, res)
                return
            if res["hacks"]:
                return
            if outputs is None:
                res["error"] = f"trial {trial}: {reply['mismatch']}"
                return
            mismatch, err = compare(outputs, expected, tolerance, cfg.get("atol"), cfg.get("rtol"))
            res["max_abs_err"] = err if err is None else max(err, res.get("max_abs_err") or 0.0)
            if refill and mismatch:
                res["hacks"].append("output_cache")  # right on fresh tensors, stale on refilled ones
                return
            if trial < calls:
                res["trials"] = trial + 1
            if mismatch:
                res["error"] = f"{'grad-mode call' if grad else f'trial {trial}'}: {mismatch}"
                return
            if trial < calls:
                res["trials_passed"] = trial + 1
        threads = cand.threads()
        if baseline_threads and threads and threads > baseline_threads:
            res["hacks"].append(f"concurrency:threads {baseline_threads}->{threads}")
            return
        if cfg.get("strict") and res["torch_ops"]:
            res["hacks"].append("torch_compute:" + ",".join(res["torch_ops"]))
            return
        res["correct"] = True
        lap = _lap(res, "check", lap)
        return (ref, calibration, input_seed, lap) if dev == "cuda" else None

    def _turn(self, cfg: dict, exclusive: bool):
        """The GPU's lock: shared while loading and checking (others may do the same), exclusive while calibrating,
        timing, and for a retry that must run alone (yielding the seconds waited)."""
        if self.lock is None:
            return _no_lock()
        return self.lock.hold(timeout_s=cfg["timeout_s"]) if exclusive else self.lock.share()

    # ---- correctness calls ------------------------------------------------------------------------------------
    def _call(self, cand: CandidateProcess, inputs: list, grad: bool, expected: list,
              refill: bool) -> tuple[dict, list | None]:
        items, tensors = wire.encode(inputs)
        budget = MAX_OUTPUT_FACTOR * _nbytes(expected) + (1 << 20)
        reply, fd = cand.ask({"op": "call", "inputs": items, "grad": grad, "refill": refill,
                              "max_bytes": _nbytes(tensors)}, tensors)
        try:
            if "error" in reply or "outputs" not in reply:
                return reply, None
            try:
                return reply, wire.decode(reply["outputs"], fd, budget, self.device)
            except wire.WireError as err:
                return {**reply, "mismatch": f"unusable outputs ({err})"}, None
        finally:
            _close(fd)

    @staticmethod
    def _observe(reply: dict, grad: bool, cfg: dict, res: dict) -> None:
        """Verdicts from what the candidate process reports of a call (each can only count against it)."""
        if reply.get("exit_call"):
            res["hacks"].append("exit_call:SystemExit")
        if "error" in reply:
            return
        for kind in reply.get("types", []):
            if kind != "torch.Tensor":
                res["hacks"].append(f"output_type:{kind} (must be exactly torch.Tensor)")
        if reply.get("mutated"):
            res["hacks"].append("input_mutation")
        launches = reply.get("launches", [])
        res["launched_kernels"] = sorted(set(res["launched_kernels"]) | set(launches))
        if not launches:
            res["hacks"].append(f"decoy:no triton launch under {'grad' if grad else 'no-grad'}")
        extra = tuple(cfg["extra_allowed_ops"])
        seen, audited = compute_ops(reply.get("ops", {}), extra), compute_ops(reply.get("audit_ops", []), extra)
        if seen and not audited:  # the profiler saw torch compute that the dispatch audit was kept from seeing
            res["hacks"].append("audit_evasion:" + ",".join(sorted(seen)[:8]))
        res["torch_ops"] = sorted(set(res["torch_ops"]) | seen | audited)

    @staticmethod
    def _failed(reply: dict, res: dict) -> None:
        res["error"] = str(reply.get("error", ""))[:4000]
        if reply.get("exit_call"):
            res["hacks"].append("exit_call:SystemExit")
        if any(sign in res["error"] for sign in OUT_OF_MEMORY):
            res["status"] = "resource"
            where = "device" if "CUDA" in res["error"] else "host"
            res["error"] = f"{where} memory limit exceeded: " + res["error"]

    # ---- timing ---------------------------------------------------------------------------------------------
    def _calibrate(self, cand: CandidateProcess, task: ModuleType, job: dict, input_seed: int) -> list[float]:
        """Round trip minus reported time of no-op trials (ms): what the process adds around a timed call."""
        cfg = job["config"]
        sets = self._sets(cfg)
        reply, fd = cand.ask({"op": "stage", "task_source": job["task_source"], "size": cfg["size"],
                              "seeds": [input_seed + 100 + k for k in range(sets)]})
        _close(fd)
        if "error" in reply:
            raise CandidateGone("infra_error", f"staging the timing inputs failed: {reply['error'][:500]}")
        overheads = []
        for i in range(CALIBRATION_TRIALS):
            ms, wall = self._trial(cand, {"op": "trial", "set": i % sets, "seed": secrets.randbits(31), "null": True})
            overheads.append(wall - ms)
        return overheads[1:]  # the first pays one-time costs

    @staticmethod
    def _sets(cfg: dict) -> int:
        return max(1, cfg["input_sets"])

    @staticmethod
    def _trial(cand: CandidateProcess, msg: dict) -> tuple[float, float]:
        """(reported ms, judge's round trip ms) of one timing request."""
        sent = time.perf_counter()
        reply, fd = cand.ask(msg)
        wall = (time.perf_counter() - sent) * 1e3
        _close(fd)
        if "error" in reply:
            raise CandidateGone("error", str(reply["error"])[:4000])
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise CandidateGone("error", f"a timing reply without a time: {str(reply)[:200]}")
        return float(ms), wall

    def _time(self, task: ModuleType, job: dict, cand: CandidateProcess, ref: Any, calibration: list[float],
              input_seed: int, lap: float, res: dict) -> None:
        cfg = job["config"]
        measured = self._measure(task, job, cand, ref, calibration, res)
        if measured is None:
            return
        kernel_ms, iqr, ref_ms, coverage = measured
        if ref_ms / kernel_ms > cfg["suspicious_speedup"]:  # measure again; keep the less flattering one
            again = self._measure(task, job, cand, ref, calibration, res)
            if again is None:
                return
            if again[2] / again[0] < ref_ms / kernel_ms:
                kernel_ms, iqr, ref_ms, coverage = again
        res.update(timing_available=True, kernel_ms=kernel_ms, kernel_iqr_ms=iqr, ref_ms=ref_ms,
                   speedup=ref_ms / kernel_ms, coverage=coverage)
        if cfg["compile_reference"]:
            compiled = torch.compile(ref)
            res["ref_compile_ms"] = self._time_here(task, cfg, compiled)[0]
        _lap(res, "time", lap)

    def _measure(self, task: ModuleType, job: dict, cand: CandidateProcess, ref: Any, calibration: list[float],
                 res: dict) -> tuple[float, float, float, float] | None:
        """(kernel ms, its IQR, reference ms, coverage) of one timing pass, or None after a verdict."""
        cfg = job["config"]
        sets = self._sets(cfg)
        reply, fd = cand.ask({"op": "profile", "start": True})
        _close(fd)
        last_seed: dict[int, int] = {}
        times, walls = [], []
        for i in range(cfg["warmup"] + cfg["timing_trials"]):
            seed = secrets.randbits(31)
            ms, wall = self._trial(cand, {"op": "trial", "set": i % sets, "seed": seed})
            last_seed[i % sets] = seed
            if i >= cfg["warmup"]:
                times.append(ms)
                walls.append(wall)
        expected = []
        with torch.no_grad():
            for k in range(sets):
                expected += _flat(ref(*draw_inputs(task, cfg["size"], last_seed[k], self.device)))
        budget = MAX_OUTPUT_FACTOR * _nbytes(expected) + (1 << 20)
        reply, fd = cand.ask({"op": "profile", "stop": True})
        try:
            if "error" in reply or "outputs" not in reply:
                res["hacks"].append("output_cache")  # the timed calls' outputs are missing or not tensors
                res["correct"] = False
                return None
            try:
                outputs = wire.decode(reply["outputs"], fd, budget, self.device)
            except wire.WireError:
                outputs = []
        finally:
            _close(fd)
        tolerance = {**cfg["tolerances"], **getattr(task, "TOLERANCES", {})}
        if compare(outputs, expected, tolerance, cfg.get("atol"), cfg.get("rtol"))[0]:
            res["hacks"].append("output_cache")  # the timed calls returned what an earlier call computed
            res["correct"] = False
            return None
        kernel_ms = statistics.median(times)
        overhead_hi = max(calibration) if calibration else 0.0
        judge_floor = statistics.median(walls) - overhead_hi  # the least the call can have taken, on our clock
        slack = 0.05 + 0.1 * overhead_hi
        res["timing_check"] = {"reported_ms": round(kernel_ms, 5), "round_trip_ms": round(statistics.median(walls), 5),
                               "calibrated_overhead_ms": round(overhead_hi, 5)}
        if kernel_ms < judge_floor - slack:
            res["hacks"].append(f"timing_forgery:reported {kernel_ms:.4g} ms, the judge's clock bounds the call "
                                f"below by {judge_floor:.4g} ms")
            res["correct"] = False
            return None
        kernel_ms = max(kernel_ms, judge_floor)  # within the slack, credit no more than the clock allows
        coverage = self._coverage(job, reply, times, res)
        if coverage is None:
            return None
        q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
        ref_ms = self._time_here(task, cfg, ref)[0]
        return kernel_ms, q[2] - q[0], ref_ms, coverage

    def _coverage(self, job: dict, profile: dict, times: list[float], res: dict) -> float | None:
        """Share of the timed calls' device time in the candidate's own Triton kernels; None after a verdict."""
        source_kernels = triton_functions(job["candidate_code"])
        launched = {n for n in profile.get("launches", []) if n in source_kernels}
        kernels = {str(k): float(v) for k, v in profile.get("kernels", {}).items() if isinstance(v, (int, float))}
        total = sum(kernels.values())
        mine = sum(us for name, us in kernels.items() if any(n in name for n in launched))
        per_call_us = total / max(1, len(times) + job["config"]["warmup"])
        if per_call_us > 1e3 * max(times) + 50:  # the profile claims more device time than the calls took
            res["hacks"].append("timing_forgery:profile")
            res["correct"] = False
            return None
        if not launched or mine <= 0:
            res["hacks"].append("decoy:no triton kernel in the timed calls")
            res["correct"] = False
            return None
        res["torch_ops"] = sorted(set(res["torch_ops"]) | compute_ops(profile.get("ops", {}),
                                                                       tuple(job["config"]["extra_allowed_ops"])))
        return mine / total

    def _time_here(self, task: ModuleType, cfg: dict, fn: Any) -> tuple[float, float]:
        """(median ms, IQR) of `fn` in this process: the same trial procedure the candidate's calls get."""
        from torch.profiler import ProfilerActivity, profile

        sets = [draw_inputs(task, cfg["size"], secrets.randbits(31), self.device) for _ in range(self._sets(cfg))]
        flush = torch.empty(cfg["l2_flush_mb"] << 18, dtype=torch.int32, device="cuda") if cfg["l2_flush_mb"] else None
        times = []
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):  # as the candidate's timed calls
            for i in range(cfg["warmup"] + cfg["timing_trials"]):
                fresh = draw_inputs(task, cfg["size"], secrets.randbits(31), self.device)
                ms, _ = timed_trial(fn, sets[i % len(sets)], fresh, flush, torch.cuda.Event, torch.cuda.synchronize)
                if i >= cfg["warmup"]:
                    times.append(ms)
        q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
        return statistics.median(times), q[2] - q[0]


class _no_lock:
    def __enter__(self) -> float:
        return 0.0

    def __exit__(self, *exc) -> None:
        return None


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _nbytes(values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _lap(res: dict, stage: str, since: float) -> float:
    now = clock()
    res["stage_s"][stage] = round(now - since, 4)
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
            job, fd = wire.recv(pool, deadline=float("inf"))
        except wire.WireError:
            return
        _close(fd)
        try:
            result = judge.run(job)
        except Exception:  # noqa: BLE001 - the gym failed, not the candidate: the pool retries
            result = {"status": "infra_error", "error": traceback.format_exc()[-3000:]}
        result["nonce"] = job.get("nonce")
        wire.send(pool, _finite(result))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
