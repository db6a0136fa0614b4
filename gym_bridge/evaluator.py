"""`Evaluator`: the one entry point. Extracts code, runs static checks in the parent, sends the rest to a
pool of sandboxed workers, and turns their measurements into `EvalResult`s with reward and reason."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from proxycomp.errors import UserError

from .config import Candidate, EvalConfig
from .extract import extract_code
from .result import EvalResult
from .reward import compute_reward
from .static_checks import StaticReport, check_source
from .tasks import load_task


class Pool(Protocol):
    def run(self, jobs: list[dict], on_result: Callable[[int, dict], None] | None = None) -> list[dict]: ...

    def close(self) -> None: ...


class Evaluator:
    """`submit(batch) -> results` (same order). A context manager; `close()` stops the workers."""

    def __init__(self, pool: Pool | None = None, config: EvalConfig | None = None, static_checks: bool = True) -> None:
        """`static_checks=False` sends every candidate to the judge as it is (to audit the judge alone)."""
        self.pool = open_pool() if pool is None else pool
        self.config = config or EvalConfig()
        self.static_checks = static_checks

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.pool.close()

    def submit(self, batch: list[Candidate],
               on_result: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
        """Results in batch order; `on_result` is called with each as soon as it is known."""
        started = time.monotonic()
        tasks = {c.task: load_task(c.task) for c in batch}
        sources = {spec: (task.name, task.source) for spec, task in tasks.items()}
        results: list[EvalResult | None] = [None] * len(batch)
        jobs, slots = [], []
        cfg = self.config.to_dict()
        for i, cand in enumerate(batch):
            name, source = sources[cand.task]
            code = extract_code(cand.code)
            base = EvalResult(id=cand.id or str(i), task=name, status="no_code")
            if code is None:
                results[i] = self._finish(base, {}, "no code block found in the reply")
                continue
            report = check_source(code) if self.static_checks else StaticReport()
            base.warnings = report.warnings
            if report.syntax_error:
                base.status, base.error = "error", report.syntax_error
                results[i] = self._finish(base, {}, report.syntax_error)
            elif report.verdicts:
                base.status, base.hacks = "flagged", list(report.verdicts)
                results[i] = self._finish(base, {}, "")
            else:
                jobs.append({"task_source": source, "candidate_code": code, "config": cfg})
                slots.append((i, base))
        if on_result is not None:
            for r in results:
                if r is not None:
                    on_result(r)

        def finished(k: int, raw: dict) -> None:
            i, base = slots[k]
            results[i] = self._finish(base, raw, "")
            if on_result is not None:
                on_result(results[i])

        if jobs:
            self.pool.run(jobs, finished)
        per = (time.monotonic() - started) / max(len(batch), 1)
        for r in results:
            r.eval_s = round(per, 4)
        return results

    def _finish(self, r: EvalResult, raw: dict, failure: str) -> EvalResult:
        for key in ("compiled", "error", "trials", "trials_passed", "max_abs_err", "speedup", "coverage",
                    "kernel_ms", "kernel_iqr_ms", "ref_ms", "ref_compile_ms", "timing_available",
                    "launched_kernels", "torch_ops", "containment", "timing_check", "device", "exit_code",
                    "attempts", "stage_s"):
            if raw.get(key) is not None:
                setattr(r, key, raw[key])
        r.hacks = list(dict.fromkeys(r.hacks + list(raw.get("hacks", []))))
        if raw:
            r.status = raw.get("status") or self._status(raw, r)
        r.correct = r.status == "ok"
        if r.max_abs_err is not None and not math.isfinite(r.max_abs_err):
            r.max_abs_err = None
        failure = failure or (r.error.splitlines()[0] if r.error else "") or f"status {r.status}"
        r.reward, r.reason = compute_reward(status=r.status, correct=r.correct, hacks=r.hacks, speedup=r.speedup,
                                            coverage=r.coverage, weights=self.config.weights, failure=failure)
        if r.hacks:
            r.status = "flagged"
        return r

    @staticmethod
    def _status(raw: dict, r: EvalResult) -> str:
        if r.hacks:
            return "flagged"
        if not raw.get("compiled"):
            return "error"
        if raw.get("correct"):
            return "ok"
        return "incorrect" if raw.get("trials") else "error"


def open_pool(workers: int | None = None, ray_address: str | None = None):
    """The judges' pool: local judge processes, or Ray actors on a cluster (`ray_address`: "auto" for the cluster
    this machine belongs to, "ray://HOST:10001", or "local" to start one here), each holding a local pool."""
    if ray_address is None:
        from .pool import LocalPool

        return LocalPool(num_workers=workers)
    try:
        from .ray_pool import RayPool
    except ImportError:
        raise UserError("a Ray cluster was asked for, and ray is not installed "
                        "(pip install 'proxycomp[ray]')") from None
    return RayPool(num_actors=workers, address=ray_address)

