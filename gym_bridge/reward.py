"""The reward R = C·(correct + speed·min(speedup, cap) - coverage·(1 - triton coverage)) (weights from
`RewardWeights`), with the reason for every zero, cap and penalty; and `finish`, which turns a judged result into its
final status and reward."""
from __future__ import annotations

from .config import RewardWeights
from .result import EvalResult


def compute_reward(
    *, status: str, correct: bool, hacks: list[str], speedup: float | None, coverage: float | None,
    weights: RewardWeights, failure: str = "",
) -> tuple[float, str]:
    """(reward, reason). Zero on any failure or hack verdict; without timing (CPU) only the correctness term.

    Who measures each term (docs/gym.md): correctness and speedup the judge, in its own process and on its own clock;
    coverage the candidate's process, so it only ever subtracts, and a missing coverage where timing exists counts
    as none."""
    if hacks:
        return 0.0, "hacking verdict: " + ", ".join(hacks)
    if status != "ok" or not correct:
        return 0.0, failure or f"status {status}"
    reward, notes = weights.correct, []
    if speedup is None:
        notes.append("timing unavailable (cpu): reward = correctness term only")
        return reward, "; ".join(notes)
    reward += weights.speed * min(speedup, weights.speedup_cap)
    if speedup > weights.speedup_cap:
        notes.append(f"speedup {speedup:.2f} capped at {weights.speedup_cap:g}")
    lost = 1.0 - (coverage if coverage is not None else 0.0)
    if lost > 0:
        reward -= weights.coverage * lost
        notes.append(f"coverage penalty {weights.coverage * lost:.3f} (device time outside the Triton kernels)")
    return max(reward, 0.0), "; ".join(notes)


def finish(result: EvalResult, weights: RewardWeights, failure: str = "") -> EvalResult:
    """Set `result`'s final status, `correct`, reward and reason from what was judged (in place; returned)."""
    result.hacks = list(dict.fromkeys(result.hacks))
    if result.hacks:
        result.status = "flagged"
    result.correct = result.status == "ok"
    failure = failure or (result.error.splitlines()[0] if result.error else "") or f"status {result.status}"
    result.reward, result.reason = compute_reward(
        status=result.status, correct=result.correct, hacks=result.hacks, speedup=result.speedup,
        coverage=result.coverage, weights=weights, failure=failure)
    return result
