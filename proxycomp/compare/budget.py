"""Equal-compute accounting: a budget matched in FLOPs or in symbols becomes each arm's number of optimizer steps.

FLOPs per symbol come from `proxycomp.model.flops_per_symbol` (6·N over every matmul incl. the output head,
plus attention over the training context), the number `ProxyLM` logs. Matched on FLOPs, an arm with a larger
vocabulary pays for its bigger head with fewer steps; matched on symbols (as the paper does), every arm takes the
same steps and the larger heads cost more FLOPs. A step is batch_size × seq_len symbols (every position is
computed, padding included). Steps are rounded down, so each arm spends at most the budget and less than
one step under it.
"""
from __future__ import annotations

from dataclasses import dataclass

from proxycomp.compare.arms import Arm, CompareError
from proxycomp.model import ModelConfig, flops_per_symbol, matmul_params
from proxycomp.views import ViewConfig

MATCHES = ("flops", "symbols")


@dataclass(frozen=True)
class Budget:
    value: float
    match: str = "flops"  # what the budget counts

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise CompareError(f"--match must be one of {', '.join(MATCHES)}, got {self.match!r}")
        if not self.value > 0:
            raise CompareError(f"--budget must be positive, got {self.value}")

    def steps(self, flops_per_symbol: float, symbols_per_step: int) -> int:
        return int(self.value // self.step_cost(flops_per_symbol, symbols_per_step))

    def step_cost(self, flops_per_symbol: float, symbols_per_step: int) -> float:
        return symbols_per_step * (flops_per_symbol if self.match == "flops" else 1)


@dataclass(frozen=True)
class ArmPlan:
    """What one arm will spend: the numbers the table reports."""

    arm: str
    vocab_size: int
    matmul_params: int
    flops_per_symbol: float
    symbols_per_step: int
    max_steps: int

    @property
    def symbols(self) -> int:
        return self.max_steps * self.symbols_per_step

    @property
    def flops(self) -> float:
        return self.symbols * self.flops_per_symbol

    def to_dict(self) -> dict:
        return {"vocab_size": self.vocab_size, "matmul_params": self.matmul_params,
                "flops_per_symbol": self.flops_per_symbol, "symbols_per_step": self.symbols_per_step,
                "max_steps": self.max_steps, "symbols": self.symbols, "flops": self.flops}


def model_config(arm: Arm, model: dict, seq_len: int, spm_vocab_size: int) -> ModelConfig:
    """The ModelConfig `ProxyLM` builds for this arm (vocab size and context linked from the data, as the CLI does)."""
    vocab = ViewConfig(arm.views, spm_vocab_size).vocabulary()
    return ModelConfig(vocab_size=vocab.size, max_seq_len=seq_len, **model)


def plan_arm(arm: Arm, budget: Budget, model: dict, seq_len: int, batch_size: int, spm_vocab_size: int,
             max_steps: int | None = None) -> ArmPlan:
    """The arm's steps under `budget`, or exactly `max_steps` when given (the raw-subset control, a twin)."""
    config = model_config(arm, model, seq_len, spm_vocab_size)
    fps = flops_per_symbol(config, seq_len)
    per_step = batch_size * seq_len
    steps = budget.steps(fps, per_step) if max_steps is None else max_steps
    if steps < 1:
        raise CompareError(
            f"--budget {budget.value:g} {budget.match} buys no step of arm {arm.name} (one step costs "
            f"{budget.step_cost(fps, per_step):.3g} {budget.match}); raise --budget or lower --batch_size/--seq_len"
        )
    return ArmPlan(arm.name, config.vocab_size, matmul_params(config), fps, per_step, steps)
