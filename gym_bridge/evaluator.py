"""`Evaluator`: the one entry point. Extracts code, runs static checks in the parent, and sends the rest as `Job`s to
a pool of judges, whose `EvalResult`s (verdict, measurements, reward and reason, decided in the judge) come back
typed."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

from proxycomp.errors import UserError

from .config import Candidate, EvalConfig, Job
from .extract import extract_code
from .result import EvalResult
from .reward import finish
from .static_checks import StaticReport, check_source
from .tasks import load_task


class Pool(Protocol):
    def run(self, jobs: list[Job], on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]: ...

    def close(self) -> None: ...


class Evaluator:
    """`submit(batch) -> results` (same order). A context manager; `close()` stops the workers."""

    def __init__(self, pool: Pool | None = None, config: EvalConfig | None = None, static_checks: bool = True) -> None:
        """`static_checks=False` sends every candidate to the judge as it is (to audit the judge alone)."""
        self.pool = open_pool() if pool is None else pool
        self.config = config or EvalConfig()
        self.static_checks = static_checks

    @classmethod
    def open(cls, config: EvalConfig | None = None, workers: int | None = None,
             ray_address: str | None = None) -> "Evaluator":
        """An evaluator over a pool of its own (`open_pool`'s), which `close()` stops."""
        return cls(open_pool(workers, ray_address), config)

    def at_size(self, size: str) -> "Evaluator":
        """An evaluator judging at problem size `size` over the same pool (closing either closes the pool)."""
        return Evaluator(self.pool, dataclasses.replace(self.config, size=size), self.static_checks)

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
        results: list[EvalResult | None] = [None] * len(batch)
        jobs: list[Job] = []
        slots: list[tuple[int, list[str]]] = []
        weights = self.config.weights
        for i, cand in enumerate(batch):
            task = tasks[cand.task]
            code = extract_code(cand.code)
            early = EvalResult(id=cand.id or str(i), task=task.name, status="no_code")
            if code is None:
                results[i] = finish(early, weights, "no ```python block and no class ModelNew in the reply: a "
                                                    "candidate defines class ModelNew(nn.Module)")
                continue
            report = check_source(code) if self.static_checks else StaticReport()
            early.warnings = report.warnings
            if report.syntax_error:
                early.status, early.error = "error", report.syntax_error
                results[i] = finish(early, weights)
            elif report.verdicts:
                early.hacks = list(report.verdicts)
                results[i] = finish(early, weights)
            else:
                jobs.append(Job(id=early.id, task=task.name, task_source=task.source, code=code, config=self.config))
                slots.append((i, report.warnings))
        if on_result is not None:
            for r in results:
                if r is not None:
                    on_result(r)

        def finished(k: int, judged: EvalResult) -> None:
            i, warnings = slots[k]
            judged.warnings = warnings
            results[i] = judged
            if on_result is not None:
                on_result(judged)

        if jobs:
            self.pool.run(jobs, finished)
        per = (time.monotonic() - started) / max(len(batch), 1)
        for r in results:
            r.eval_s = round(per, 4)
        return results


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

