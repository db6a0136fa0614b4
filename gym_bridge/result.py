"""`EvalResult`: one typed, JSON-serializable record per candidate, and its compact RL feedback text."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

# Terminal states, in pipeline order. Only "ok" can earn a reward.
STATUSES = (
    "no_code",      # nothing to evaluate in the reply
    "flagged",      # a hacking verdict (static or runtime)
    "error",        # the candidate failed to load or raised
    "incorrect",    # ran, but outputs differ from the reference
    "timeout",      # killed after the wall timeout
    "crashed",      # the candidate process died (signal / exit code)
    "resource",     # the candidate exceeded a limit (memory, CPU time)
    "infra_error",  # the gym failed, not the candidate (retried first)
    "ok",
)
FEEDBACK_LIMIT = 800


@dataclass
class EvalResult:
    id: str
    task: str
    status: str
    reward: float = 0.0
    reason: str = ""
    compiled: bool = False
    correct: bool = False
    hacks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    trials_passed: int = 0
    trials: int = 0
    max_abs_err: float | None = None
    speedup: float | None = None
    coverage: float | None = None
    kernel_ms: float | None = None
    kernel_iqr_ms: float | None = None
    ref_ms: float | None = None
    ref_compile_ms: float | None = None
    timing_available: bool = False
    launched_kernels: list[str] = field(default_factory=list)
    torch_ops: list[str] = field(default_factory=list)  # torch compute ops seen in the candidate's calls
    containment: list[str] = field(default_factory=list)  # the OS layers that held the candidate process
    timing_check: dict = field(default_factory=dict)  # the judge's clock against the reported kernel time
    device: str = ""
    exit_code: int | None = None
    eval_s: float = 0.0  # the submit call's wall time divided by its batch size (overhead + measurement)
    attempts: int = 1  # > 1 only after an infrastructure retry
    stage_s: dict = field(default_factory=dict)  # judge s: spawn, load, check (share_wait, share_held), time, ...

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"EvalResult.status={self.status!r}: expected one of {STATUSES}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalResult":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"EvalResult.from_dict: unknown fields {sorted(unknown)}")
        return cls(**d)

    def feedback(self) -> str:
        """Compact text for the next RL turn (at most FEEDBACK_LIMIT bytes)."""
        lines = [f"status: {self.status}" + (f" ({self.reason})" if self.reason else "")]
        if self.hacks:
            lines.append("hacking verdicts: " + ", ".join(self.hacks))
        if self.error:
            lines.append("error:\n" + "\n".join(self.error.strip().splitlines()[-4:]))
        if self.trials:
            err = f", max abs error {self.max_abs_err:.3g}" if self.max_abs_err is not None and self.correct else ""
            lines.append(f"correctness: {self.trials_passed}/{self.trials} trials passed{err}")
        if self.speedup is not None:
            lines.append(f"speedup vs reference: {self.speedup:.3f}x ({self.kernel_ms:.4g} ms vs {self.ref_ms:.4g} ms)")
        if self.coverage is not None:
            lines.append(f"triton coverage of CUDA time: {self.coverage:.1%}")
        if self.torch_ops:
            lines.append("torch compute beside the kernels: " + ", ".join(self.torch_ops[:8]))
        if self.warnings:
            lines.append("warnings: " + "; ".join(self.warnings))
        text = "\n".join(lines)
        raw = text.encode()
        return text if len(raw) <= FEEDBACK_LIMIT else raw[: FEEDBACK_LIMIT - 3].decode(errors="ignore") + "..."


def mean_stages(stage_dicts: Iterable[dict]) -> dict[str, float]:
    """Mean worker seconds per pipeline stage (EvalResult.stage_s) over the candidates that reached it."""
    stages: dict[str, list[float]] = {}
    for stage_s in stage_dicts:
        for stage, seconds in stage_s.items():
            stages.setdefault(stage, []).append(seconds)
    return {stage: sum(v) / len(v) for stage, v in stages.items()}
