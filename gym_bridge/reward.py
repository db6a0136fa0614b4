"""The reward R = C + C·min(speedup, cap) + C·coverage (weights from `RewardWeights`), with the reason for
every zero or cap."""
from __future__ import annotations

from .config import RewardWeights


def compute_reward(
    *, status: str, correct: bool, hacks: list[str], speedup: float | None, coverage: float | None,
    weights: RewardWeights, failure: str = "",
) -> tuple[float, str]:
    """(reward, reason). Zero on any failure or hack verdict; on CPU (no timing) only the correctness term."""
    if hacks:
        return 0.0, "hacking verdict: " + ", ".join(hacks)
    if status != "ok" or not correct:
        return 0.0, failure or f"status {status}"
    reward, notes = weights.correct, []
    if speedup is None:
        notes.append("timing unavailable (cpu): reward = correctness term only")
    else:
        reward += weights.speed * min(speedup, weights.speedup_cap)
        if speedup > weights.speedup_cap:
            notes.append(f"speedup {speedup:.2f} capped at {weights.speedup_cap:g}")
    if coverage is None:
        if speedup is not None:
            notes.append("coverage unavailable")
    else:
        reward += weights.coverage * coverage
    return reward, "; ".join(notes)
