"""What to evaluate (`Candidate`), how (`EvalConfig`), and what a judge is handed (`Job`): dataclasses that cross
process and Ray boundaries as JSON dicts and are rebuilt, checked, on the other side."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from proxycomp.errors import UserError

SIZES = ("cpu", "gpu", "gpu_heldout")


@dataclass(frozen=True)
class Candidate:
    """One model reply (or bare code) for one task. `task` is a registered task name or a task file path."""

    task: str
    code: str
    id: str = ""


@dataclass(frozen=True)
class RewardWeights:
    """R = C·(correct + speed·min(speedup, speedup_cap) - coverage·(1 - triton_coverage)), C the correctness (0/1).

    KernelGYM's R = C + C·min(s, 3) + C·PR less its coverage weight: the coverage term is a penalty for device time
    spent outside the candidate's Triton kernels, not a bonus. Coverage is what the candidate's own process reports
    (its profile), so it may only lower a reward: a forged profile can erase the penalty, never earn more than the
    correctness and speed terms that the judge measured itself (docs/gym.md).

    Args:
        correct: weight of correctness
        speed: weight of the capped speedup
        coverage: weight of the penalty for device time outside the candidate's Triton kernels
        speedup_cap: the speedup counts up to this
    """

    correct: float = 1.0
    speed: float = 1.0
    coverage: float = 1.0
    speedup_cap: float = 3.0


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation settings shared by every candidate of a `submit` call.

    Tolerances are per output dtype (atol = rtol = the dtype's entry); fp32 defaults to KernelBench HEAD's 1e-4,
    which an fp16/bf16 downcast (~5e-4 relative rounding) or TF32 matmul cannot meet. `atol`/`rtol` override them
    for every dtype (KernelBench v0 and KernelGYM: 1e-2). Torch compute beside a real Triton kernel is legal and
    lowers the coverage (KernelGYM's rule); `strict` makes it a hacking verdict. `extra_allowed_ops` widens the
    glue list (aten op names such as "add.Tensor") for tasks that legitimately keep some glue in torch.
    `memory_limit_mb` caps each candidate process (address space on CPU, data segment with CUDA);
    `input_sets` is how many input tensors each side keeps for timing (each trial refills one with new values);
    `profile_calls` how many calls the profiler watches for the coverage, after the timing.
    `seed` None (the default) has the judge draw secret seeds per evaluation, so no candidate can compute its
    outputs in advance; a fixed seed makes an evaluation repeatable and gives that defence up.

    Args:
        size: problem size: cpu, gpu or gpu_heldout
        correct_trials: random inputs a candidate must match the reference on
        seed: input seed; null: secret seeds drawn per evaluation
        tolerances: atol = rtol per output dtype
        timeout_s: wall seconds per candidate
        retries: retries of a job whose judge failed (an infrastructure fault, not the candidate's)
        warmup: untimed calls before the timing
        timing_trials: timed calls (GPU)
        input_sets: input tensors each side keeps for timing
        l2_flush_mb: L2 cache flushed between timed calls, in MB
        compile_reference: time the reference under torch.compile
        suspicious_speedup: a speedup above this is measured again and the less flattering figure kept
        profile_calls: calls the profiler watches for the Triton coverage
        weights: the reward's weights
        extra_allowed_ops: aten ops (e.g. add.Tensor) allowed as glue besides the default list
        memory_limit_mb: memory cap of each candidate process, in MB
        cpu_limit_s: CPU seconds cap of each candidate process
        atol: absolute tolerance for every dtype; null: tolerances
        rtol: relative tolerance for every dtype; null: tolerances
        strict: torch compute beside a Triton kernel is a hacking verdict
    """

    size: str = "cpu"
    correct_trials: int = 3
    seed: int | None = None
    tolerances: dict = field(
        default_factory=lambda: {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2, "float64": 1e-7})
    timeout_s: float = 120.0
    retries: int = 1
    warmup: int = 3
    timing_trials: int = 30
    input_sets: int = 2
    l2_flush_mb: int = 256
    compile_reference: bool = False
    suspicious_speedup: float = 3.0
    profile_calls: int = 10
    weights: RewardWeights = field(default_factory=RewardWeights)
    extra_allowed_ops: tuple = ()
    memory_limit_mb: int = 8192
    cpu_limit_s: int = 300
    atol: float | None = None
    rtol: float | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise UserError(f"EvalConfig.size={self.size!r}: use one of {', '.join(SIZES)}")
        if self.correct_trials < 1 or self.timing_trials < 1 or self.input_sets < 1:
            raise UserError("EvalConfig.correct_trials, timing_trials and input_sets must be >= 1")
        if self.timeout_s <= 0:
            raise UserError(f"EvalConfig.timeout_s={self.timeout_s}: must be > 0 seconds")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalConfig":
        d = dict(d)
        d["weights"] = RewardWeights(**d.get("weights", {}))
        d["extra_allowed_ops"] = tuple(d.get("extra_allowed_ops", ()))
        d["tolerances"] = dict(d.get("tolerances", cls().tolerances))
        return cls(**d)


@dataclass(frozen=True)
class Job:
    """One candidate as a judge receives it: the task's source (references are not secret), the extracted code, the
    settings. `alone`: a retry after the GPU ran out of memory while shared, judged with the GPU to itself."""

    id: str
    task: str
    task_source: str
    code: str
    config: EvalConfig = field(default_factory=EvalConfig)
    alone: bool = False

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "config": self.config.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) - names or not {"id", "task", "task_source", "code"} <= set(d):
            raise ValueError(f"not a Job: {sorted(d) if isinstance(d, dict) else type(d).__name__}")
        return cls(**{**d, "config": EvalConfig.from_dict(d.get("config", {}))})
