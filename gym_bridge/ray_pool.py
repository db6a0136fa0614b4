"""`RayPool`: the same `run(jobs)` interface as `LocalPool`, spread over Ray actors (one per GPU, or
`num_actors` CPU actors). Each actor owns a one-slot `LocalPool`, so candidates still run in sandboxed
child processes and a crash costs a worker, never the actor. A dead actor (node loss) is an
infrastructure fault: it is replaced and the job retried up to `config.retries` times.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import ray

from .config import Job
from .pool import LocalPool
from .result import EvalResult


class _GymActor:
    def __init__(self) -> None:
        gpus = [str(g) for g in ray.get_gpu_ids()]
        self.pool = LocalPool(num_workers=1, devices=gpus[:1] or [])

    def run(self, job: dict) -> dict:
        """A job and its result cross to and from the actor as dicts, typed on both sides."""
        return self.pool.run([Job.from_dict(job)])[0].to_dict()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.pool.close()


class RayPool:
    def __init__(self, num_actors: int | None = None, address: str | None = None) -> None:
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.num_gpus = 1 if gpus else 0
        self.num_actors = num_actors or gpus or 1
        if self.num_actors < 1:
            raise ValueError(f"RayPool(num_actors={num_actors}): need at least one actor")
        self._remote = ray.remote(num_gpus=self.num_gpus, num_cpus=1, max_restarts=0)(_GymActor)
        self.actors = [self._remote.remote() for _ in range(self.num_actors)]

    def run(self, jobs: list[Job], on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """Results in job order; each idle actor takes the next job; `on_result(index, result)` as each finishes."""
        results: list[EvalResult | None] = [None] * len(jobs)
        attempts = [0] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        idle = list(range(self.num_actors))
        running: dict = {}
        while todo or running:
            while todo and idle:
                slot, i = idle.pop(), todo.pop()
                attempts[i] += 1
                running[self.actors[slot].run.remote(jobs[i].to_dict())] = (slot, i)
            done, _ = ray.wait(list(running), num_returns=1)
            slot, i = running.pop(done[0])
            try:
                results[i] = EvalResult.from_dict(ray.get(done[0]))
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                self.actors[slot] = self._remote.remote()
                if attempts[i] > jobs[i].config.retries:
                    results[i] = EvalResult(id=jobs[i].id, task=jobs[i].task, status="infra_error",
                                            error=f"ray actor died: {exc}", attempts=attempts[i])
                else:
                    todo.append(i)
            if results[i] is not None and on_result is not None:
                on_result(i, results[i])
            idle.append(slot)
        return results

    def close(self) -> None:
        for actor in self.actors:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except ray.exceptions.RayError:
                pass
            ray.kill(actor)
        self.actors = []
