"""The settings of `proxycomp rl`: the `RLConfig` tree that jsonargparse reads from YAML and dotted flags, and the
run's own arguments (`RunArgs`)."""
from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from proxycomp.defaults import default_precision
from proxycomp.errors import UserError

from ..config import EvalConfig
from ..family.files import read_buckets
from ..tasks import Task, draw_tasks, list_tasks, load_task, load_task_set
from ._checks import RLConfigError
from .algorithm import AlgorithmConfig
from .evaluation import EvaluationConfig
from .rollout import RolloutConfig
from .warmstart import WarmStartConfig


@dataclass
class GymSettings:
    """The gym that scores the training episodes.

    Args:
        eval: how the gym judges a candidate (its EvalConfig): eval.size is the problem size of the training episodes,
            cpu or gpu (gpu_heldout is for evaluation); the held-out evaluation judges alike at evaluation.sizes
        workers: gym judge processes (Ray actors with ray_address); null: one per GPU, else 1
        ray_address: judge on a Ray cluster: auto (the one this machine is in), ray://HOST:10001, or local (start
            one here); null: judge processes on this machine
        size: eval.size, by the name it had before gym held an EvalConfig (older configs and flags)
        correct_trials: eval.correct_trials, likewise
        timeout_s: eval.timeout_s, likewise
    """

    eval: EvalConfig = field(default_factory=EvalConfig)
    workers: int | None = None
    ray_address: str | None = None
    size: InitVar[str | None] = None
    correct_trials: InitVar[int | None] = None
    timeout_s: InitVar[float | None] = None

    def __post_init__(self, size: str | None, correct_trials: int | None, timeout_s: float | None) -> None:
        given = (("size", str, size), ("correct_trials", int, correct_trials), ("timeout_s", float, timeout_s))
        old, default = {}, EvalConfig()
        for name, kind, value in given:
            if value is None:
                continue
            try:  # jsonargparse leaves an InitVar's value unchecked
                old[name] = kind(value)
            except ValueError:
                raise RLConfigError(f"gym.{name}: {value!r} is not a {kind.__name__}") from None
            if getattr(self.eval, name) not in (old[name], getattr(default, name)):  # which one was meant is unknown
                raise RLConfigError(f"gym.{name}: differs from gym.eval.{name}; give gym.eval.{name} alone")
        try:
            self.eval = dataclasses.replace(self.eval, **old)
        except UserError as err:  # EvalConfig's own refusal, under the names this config was given
            raise RLConfigError(f"gym.{', gym.'.join(old)}: {err}") from None


@dataclass
class FabricSettings:
    """Where and in what precision the policy runs (Lightning Fabric).

    Args:
        accelerator: Fabric's accelerator: auto, cpu or cuda
        precision: Fabric's precision; null: bf16-mixed on CUDA, 32-true on CPU
        matmul_precision: torch.set_float32_matmul_precision of the policy process: high lets fp32 matmuls use
            TF32 (the gym's workers keep TF32 off for their own timing and correctness, whatever this says)
    """

    accelerator: str = "auto"
    precision: str | None = None
    matmul_precision: str = "highest"

    def __post_init__(self) -> None:
        if self.matmul_precision not in ("highest", "high", "medium"):
            raise RLConfigError(f"fabric.matmul_precision: {self.matmul_precision!r} is not highest, high or medium")

    def build(self, seed: int):
        """A one-device Fabric with atomic checkpoints, seeded, and this process's matmul precision set."""
        import torch
        from lightning.fabric import Fabric

        from proxycomp.checkpoint import AtomicCheckpointIO

        precision = self.precision or default_precision()
        fabric = Fabric(accelerator=self.accelerator, devices=1, precision=precision, plugins=[AtomicCheckpointIO()])
        fabric.seed_everything(seed)
        torch.set_float32_matmul_precision(self.matmul_precision)
        return fabric


class RunTasks(NamedTuple):
    """The tasks of one run: the warm start's, RL's, and the held-out evaluation's sets by name."""

    sft: list[Task]
    rl: list[Task]
    evaluated: dict[str, list[Task]]


def _default_tasks() -> list[str]:
    return ["relu", "silu"]


# Fields that do not change what the held-out evaluation of a given model measures.
_NOT_EVALUATED = ("steps", "tasks_per_step", "save_every", "max_time_s", "algorithm", "warmstart",
                  "extrapolate_context")


@dataclass
class RLConfig:
    """Multi-turn kernel RL.

    Args:
        tasks: train tasks (shipped names or task file paths)
        task_set: a task-set folder (`proxycomp gym generate`'s OUT/tasks, a KernelBench level...): RL trains on
            its train_split instead of `tasks`, and evaluation.splits names the splits to evaluate on; null: none
        train_split: the split of task_set RL trains on
        steps: RL steps (rollout and update each)
        tasks_per_step: train tasks per step, in rotation
        seed: sampling and rejection seeds (a resumed run repeats a step exactly)
        save_every: write OUT/checkpoints/last.ckpt every this many steps (and at the last)
        max_time_s: wall seconds for this invocation, after-RL evaluation included: RL stops, checkpointed, before
            a step that would leave too little time, and the policy is evaluated after the steps it took; null: no
            limit
        max_context: most prompt + reply symbols; null: the context the --ckpt was pretrained at (its max_seq_len)
        extrapolate_context: allow a max_context past the pretrained context (RoPE positions the model never trained
            on); without it such a max_context is refused
        decode: the sampler's decode loop: auto (a CUDA graph on a GPU, the eager loop elsewhere), graph, static
            or dynamic
        rollout: how the training episodes are sampled
        algorithm: the policy update
        warmstart: the supervised warm start before RL
        evaluation: the held-out evaluation before and after RL
        gym: the gym that scores the training episodes
        fabric: where and in what precision the policy runs
    """

    tasks: list[str] = field(default_factory=_default_tasks)
    task_set: str | None = None
    train_split: str = "train"
    steps: int = 20
    tasks_per_step: int = 2
    seed: int = 0
    save_every: int = 5
    max_time_s: float | None = None
    max_context: int | None = None
    extrapolate_context: bool = False
    decode: Literal["auto", "graph", "static", "dynamic"] = "auto"
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    gym: GymSettings = field(default_factory=GymSettings)
    fabric: FabricSettings = field(default_factory=FabricSettings)

    def __post_init__(self) -> None:
        if self.max_time_s is not None and self.max_time_s <= 0:
            raise RLConfigError(f"max_time_s: must be > 0 seconds (or null for no limit), got {self.max_time_s}")
        if self.evaluation.splits and self.task_set is None:
            raise RLConfigError(f"evaluation.splits {self.evaluation.splits}: needs task_set, the folder they split")
        if self.tasks_per_step < 1:  # refused here, before a warm start and an evaluation run for nothing
            raise RLConfigError(f"tasks_per_step: must be >= 1, got {self.tasks_per_step}")

    def context(self, trained: int) -> int:
        """Prompt + reply symbols for a policy pretrained at `trained` symbols: past them only when told."""
        context = self.max_context or trained
        if context > trained and not self.extrapolate_context:
            raise RLConfigError(f"max_context {context} is past the {trained} symbols the --ckpt was pretrained at; "
                                "pretrain at the RL context, lower max_context (and rollout.prompt_max_bytes + "
                                "rollout.max_bytes) or set extrapolate_context: true")
        self.rollout.check_context(context)
        return context

    def evaluated_settings(self) -> dict:
        """The fields that decide what the held-out evaluation of a given model measures."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_EVALUATED}

    def load_tasks(self) -> RunTasks:
        """The train tasks, split between the warm start and RL by `warmstart.sft_tasks`, and the evaluation sets by
        name (see `evaluation.EvaluationConfig`). Refuses a run without train tasks, or whose split leaves RL none."""
        evaluation, sft_tasks = self.evaluation, self.warmstart.sft_tasks
        buckets = read_buckets(Path(self.task_set).expanduser().resolve()) if self.task_set is not None else {}
        task_set = load_task_set(self.task_set) if self.task_set is not None else None
        train = task_set.split(self.train_split) if task_set is not None else [load_task(name) for name in self.tasks]
        named = {"tasks": [load_task(name) for name in evaluation.tasks or ()],
                 "shipped": list_tasks() if evaluation.shipped else []}
        if not train:  # refused before a warm start and an evaluation run for nothing
            where = f"split {self.train_split!r} of {self.task_set}" if task_set is not None else "tasks"
            raise RLConfigError(f"no train tasks in {where}: RL needs at least one")
        sft, rl = train, train  # apart only with sft_tasks and a warm start to keep them from
        if sft_tasks is not None and self.warmstart.steps > 0:
            if len(train) <= sft_tasks:
                raise RLConfigError(f"warmstart.sft_tasks={sft_tasks} takes all {len(train)} train tasks; RL needs "
                                    "some outside the warm start's")
            sft, rl = train[:sft_tasks], train[sft_tasks:]
        sets = {}
        for split in evaluation.splits:
            groups: dict[str, list[Task]] = {}
            for task in task_set.split(split):
                groups.setdefault(buckets.get(task.name, split), []).append(task)
            for bucket, tasks in groups.items():  # a generated family's held-out buckets are reported apart
                name = split if len(groups) == 1 else f"{split}:{bucket.removeprefix(split + '_')}"
                sets[name] = draw_tasks(tasks, evaluation.max_tasks, evaluation.seed)
        sets |= {name: tasks for name, tasks in named.items() if tasks}
        return RunTasks(list(sft), list(rl), sets or {"train": list(train)})


@dataclass
class RunArgs:
    """The run's arguments besides the config: the initial policy, the run folder and how to start."""

    ckpt: Path
    out: Path
    resume: bool = False
    warmstart_only: bool = False

    def checkpoint(self) -> Path:
        """OUT/checkpoints/last.ckpt: there to resume from with --resume, else not there (a fresh run)."""
        path = self.out / "checkpoints" / "last.ckpt"
        if self.resume and not path.is_file():
            raise RLConfigError(f"--resume: no checkpoint at {path}; run without --resume to start (a warm start "
                                "killed midway goes on by itself)")
        if not self.resume and path.exists():
            raise RLConfigError(f"--out {self.out} already holds a run; pass --resume to continue it "
                                "or choose another --out")
        return path
