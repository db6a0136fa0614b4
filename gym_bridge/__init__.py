"""Embedded KernelGYM and kernel RL (imported as proxycomp.gym_bridge).

`Evaluator.open(config, workers).submit([Candidate(...)]) -> [EvalResult]` (or `Evaluator(pool, config)` over a
pool of your own) runs each candidate through code
extraction, static checks, and a judge process that runs the candidate in a fresh, contained process of its own
(correctness, hacking verdicts, timing checked on the judge's clock, coverage), then the reward. Pools: `LocalPool`
(processes on this machine) and `RayPool` (Ray actors, one per GPU). docs/gym.md has the threat model.
"""
from .config import Candidate, EvalConfig, RewardWeights
from .evaluator import Evaluator
from .extract import extract_code
from .pool import LocalPool
from .result import EvalResult


def __getattr__(name: str):
    if name == "RayPool":  # ray is an optional extra: import it only when asked for
        from .ray_pool import RayPool

        return RayPool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Candidate", "EvalConfig", "EvalResult", "Evaluator", "LocalPool", "RayPool", "RewardWeights",
           "extract_code"]
