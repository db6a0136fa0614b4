"""`proxycomp rl`: warm start, held-out evaluation, RL, held-out evaluation again.

    proxycomp rl --config recipes/rl/trloo_kernel.yaml --ckpt RUN/checkpoints/last.ckpt [--out DIR] [--resume]
                 [--algorithm.estimator grpo] [--steps 50] [...any config field...]
    proxycomp rl --config ... --ckpt ... --out DIR --warmstart_only   # only OUT/warmstart/ (model, evaluation)

The config is the `RLConfig` dataclass tree, read from YAML by jsonargparse; any field can be overridden
on the command line with its dotted name. An unknown key is a one-line error naming it. On CPU the gym's
Triton kernels run in the interpreter (TRITON_INTERPRET=1 is set for the workers).

Every checkpoint it writes (OUT/warmstart/model.ckpt, OUT/checkpoints/last.ckpt) holds the base model's
hyper-parameters and tokenizer besides the weights, as one of `fit` does, so `proxycomp generate`, `eval-bpb` and
`fit --init_from` read it. A warm start killed midway goes on from OUT/warmstart/partial.ckpt when run again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager, Literal

import torch

from proxycomp.checkpoint import lm_state, model_weights, reading, save_lm
from proxycomp.command import command_parser
from proxycomp.errors import UserError
from proxycomp.files import write_atomic
from proxycomp.lit import ProxyLM

from ..config import SIZES, EvalConfig
from ..evaluator import Evaluator, open_pool
from ..policy import ByteLMPolicy
from ..pool import timing_lock_path, visible_gpus
from ..tasks import Task, list_tasks, load_task, load_task_set
from ..timing import DeviceLock
from .code_bpb import CodeBpb, code_documents
from .evaluation import EvalRow, EvaluationConfig, evaluate_policy, format_table
from .rollout import RolloutConfig
from .trainer import AlgorithmConfig, RLTrainer
from .warmstart import (
    WarmStartConfig,
    build_corpus,
    corpus_examples,
    load_corpus,
    save_corpus,
    warm_start,
)

USAGE = __doc__.split("\n\n")[1]


@dataclass
class GymSettings:
    """The gym that scores the training episodes.

    Args:
        size: problem size of the training episodes: cpu or gpu (gpu_heldout is for evaluation)
        workers: gym judge processes (Ray actors with ray_address); null: one per GPU, else 1
        ray_address: judge on a Ray cluster: auto (the one this machine is in), ray://HOST:10001, or local (start
            one here); null: judge processes on this machine
        correct_trials: random inputs a candidate must match the reference on
        timeout_s: wall seconds per candidate
    """

    size: str = "cpu"
    workers: int | None = None
    ray_address: str | None = None
    correct_trials: int = 3
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"gym.size: {self.size!r} is not one of {', '.join(SIZES)}")


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
            raise ValueError(f"fabric.matmul_precision: {self.matmul_precision!r} is not highest, high or medium")


def _default_tasks() -> list[str]:
    return ["relu", "silu"]


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
        max_context: most prompt + reply symbols; null: the model's max_seq_len
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
    decode: Literal["auto", "graph", "static", "dynamic"] = "auto"
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    gym: GymSettings = field(default_factory=GymSettings)
    fabric: FabricSettings = field(default_factory=FabricSettings)

    def __post_init__(self) -> None:
        if self.max_time_s is not None and self.max_time_s <= 0:
            raise ValueError(f"max_time_s: must be > 0 seconds (or null for no limit), got {self.max_time_s}")
        if self.evaluation.splits and self.task_set is None:
            raise ValueError(f"evaluation.splits {self.evaluation.splits}: needs task_set, the folder they split")


class RLConfigError(UserError):
    """Bad config, paths or command-line flags."""


def _parser():
    parser = command_parser("proxycomp rl", "Multi-turn kernel RL (TRLOO) in the embedded gym.")
    parser.add_argument("--config", action="config", help="a YAML file of RLConfig fields (recipes/rl/*.yaml)")
    parser.add_argument("--ckpt", required=True, help="the initial policy: a .ckpt written by proxycomp (fit, rl)")
    parser.add_argument("--out", default="runs/rl", help="run folder: metrics, checkpoints, corpus, eval tables")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.ckpt")
    parser.add_argument("--warmstart_only", action="store_true",
                        help="stop after writing OUT/warmstart/model.ckpt and its evaluation before RL "
                             "(to share one warm start between runs)")
    parser.add_class_arguments(RLConfig, None)
    return parser


@dataclass
class RunArgs:
    ckpt: Path
    out: Path
    resume: bool = False
    warmstart_only: bool = False


def parse_config(argv: Sequence[str]) -> tuple[RLConfig, RunArgs]:
    """(config, run arguments); bad input raises RLConfigError with one line."""
    from jsonargparse import ArgumentError

    parser = _parser()
    try:
        namespace = parser.instantiate_classes(parser.parse_args(list(argv)))
        config = RLConfig(**{f.name: namespace[f.name] for f in dataclasses.fields(RLConfig)})
    except ArgumentError as err:
        raise RLConfigError(" ".join(str(err).split())) from None
    except (ValueError, TypeError, KeyError) as err:  # a dataclass __post_init__ refused its values
        raise RLConfigError(" ".join(str(err).strip("'\"").split())) from None
    args = RunArgs(Path(namespace.ckpt), Path(namespace.out), bool(namespace.resume), bool(namespace.warmstart_only))
    if args.warmstart_only and (args.resume or config.warmstart.steps == 0):
        raise RLConfigError("--warmstart_only needs warmstart.steps > 0 and no --resume")
    return config, args


@dataclass
class BaseModel:
    """The model RL starts from: its module, against which a saved model is checked, and its hyper-parameters and
    tokenizer, which every checkpoint of the run carries besides its own weights."""

    lm: ProxyLM
    hyper_parameters: dict
    spm_model: bytes | None

    def load_into(self, module: torch.nn.Module, fabric, path: Path, state: dict | None = None) -> None:
        """Load the weights of checkpoint `path` into `module` (and its other `state`, as fabric.load does), after
        checking that they were trained from a model of this one's shape."""
        with reading(path):
            saved = fabric.load(path, state)
        changes = self.lm.weight_changes(saved.get("hyper_parameters") or {})
        if changes:
            raise RLConfigError(f"{path} does not fit the model of --ckpt ({'; '.join(changes)}); use another --out "
                                "or delete that file")
        module.load_state_dict(model_weights(saved))


def _warm_start(config: RLConfig, fabric, policy: ByteLMPolicy, base: BaseModel, tasks: list, gym: Evaluator,
                out_dir: Path) -> None:
    """Build (or reload) the corpus, train on it (going on from a partial checkpoint), save the result to
    OUT/warmstart/model.ckpt."""
    corpus_path = out_dir / "warmstart" / "corpus.jsonl"
    partial = out_dir / "warmstart" / "partial.ckpt"
    started = time.monotonic()
    if corpus_path.is_file():
        variants = load_corpus(corpus_path)
    else:
        variants = build_corpus(tasks, gym, config.warmstart.label_tasks)
        save_corpus(variants, corpus_path)
    examples = corpus_examples(variants, tasks, config.rollout.instructions, config.rollout.prompt_max_bytes)
    longest = max(len(e.reply.encode()) for e in examples)
    if longest >= config.rollout.max_bytes:
        raise RLConfigError(f"rollout.max_bytes={config.rollout.max_bytes} cannot hold the longest warm-start "
                            f"reply ({longest} bytes); raise it or drop the task with the longest solution")
    kinds = {k: sum(e.kind == k for e in examples) for k in ("first_turn", "first_turn_broken", "fix")}
    print(f"warm start: {len(variants)} variants ({time.monotonic() - started:.0f} s), examples {kinds}", flush=True)
    started = time.monotonic()
    settings = config.warmstart
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(
        policy.module.parameters(), lr=settings.lr, weight_decay=settings.weight_decay))
    generator = torch.Generator().manual_seed(config.seed)
    progress = {"optimizer": optimizer, "step": 0, "generator": generator.get_state()}
    if partial.is_file():  # a warm start killed midway: its weights, optimizer and sampling go on
        base.load_into(policy.module, fabric, partial, progress)
        generator.set_state(progress["generator"])
        print(f"warm start: going on from step {progress['step']} ({partial})", flush=True)

    def sft_step(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        fabric.backward(loss)
        fabric.clip_gradients(policy.module, optimizer, max_norm=settings.grad_clip)
        optimizer.step()

    def save_partial(step: int) -> None:
        if step % settings.save_every == 0 and step < settings.steps:
            fabric.save(partial, {**lm_state(base.hyper_parameters, policy.module, base.spm_model),
                                  "optimizer": optimizer, "step": step, "generator": generator.get_state()})

    warm_start(policy, examples, settings, step_fn=sft_step, generator=generator, start=progress["step"],
               after_step=save_partial,
               log=lambda step, loss: print(f"warm start step {step:>4}  nll/byte {loss:.4f}", flush=True))
    print(f"warm start: {settings.steps} steps in {time.monotonic() - started:.0f} s", flush=True)
    save_lm(out_dir / "warmstart" / "model.ckpt", base.hyper_parameters, policy.module, base.spm_model)
    partial.unlink(missing_ok=True)


def gpu_turn(device: torch.device) -> Callable[[], ContextManager]:
    """The policy's shared hold on the timing lock of its GPU (timing.DeviceLock): the gym's workers, this run's
    and any other run's on the machine, time no candidate while the policy samples or updates on that GPU."""
    if device.type != "cuda":
        return contextlib.nullcontext
    lock = DeviceLock(timing_lock_path(visible_gpus(torch.cuda.device_count())[device.index or 0]))

    @contextlib.contextmanager
    def turn():
        with lock.share():
            yield
            torch.cuda.synchronize(device)  # queued kernels (an optimizer step) finish before a timing may start

    return turn


def train_and_evaluation_tasks(config: RLConfig) -> tuple[list[Task], dict[str, list[Task]]]:
    """The train tasks, and the evaluation sets by name (see `evaluation.EvaluationConfig`)."""
    evaluation = config.evaluation
    task_set = load_task_set(config.task_set) if config.task_set is not None else None
    train = task_set.split(config.train_split) if task_set is not None else [load_task(name) for name in config.tasks]
    sets = {split: task_set.split(split)[:evaluation.max_tasks] for split in evaluation.splits}
    if evaluation.tasks:
        sets["tasks"] = [load_task(name) for name in evaluation.tasks]
    if evaluation.shipped:
        sets["shipped"] = list_tasks()
    return train, sets or {"train": train}


def _evaluate(config: RLConfig, policy: ByteLMPolicy, evaluator, sets: dict, phase: str) -> list[dict]:
    started, rows = time.monotonic(), []
    for size in config.evaluation.sizes:
        rows += [dataclasses.asdict(r) for r in evaluate_policy(
            policy, evaluator(size), size, sets, config.rollout, config.evaluation, phase)]
    print(f"evaluation {phase}: {time.monotonic() - started:.0f} s", flush=True)
    return rows


# Fields that do not change what the held-out evaluation of a given model measures.
_NOT_EVALUATED = ("steps", "tasks_per_step", "save_every", "max_time_s", "algorithm", "warmstart")


def _before_rl(config: RLConfig, policy: ByteLMPolicy, evaluator, sets: dict, warm_dir: Path | None
               ) -> tuple[list[dict], float]:
    """The held-out rows of the policy before RL, and the seconds they took to measure. A warm start's rows are
    kept beside its model (warm_dir/eval_before.json) and reused by every run from that model with the same
    evaluation settings, so the estimators of one comparison start from one measured baseline (and one
    evaluation's device time)."""
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k not in _NOT_EVALUATED}
    cache = warm_dir / "eval_before.json" if warm_dir is not None else None
    if cache is not None and cache.is_file():
        try:
            kept = json.loads(cache.read_text())
            if kept["settings"] == json.loads(json.dumps(settings)):
                print(f"evaluation before RL: reusing the warm start's ({cache})", flush=True)
                return kept["rows"], kept["seconds"]
        except (ValueError, KeyError, TypeError) as err:  # a damaged file is measured again, not trusted
            print(f"evaluation before RL: {cache} is unreadable ({err!r}); measuring again", flush=True)
    started = time.monotonic()
    rows = _evaluate(config, policy, evaluator, sets, "before RL" if warm_dir is None else "before RL (after SFT)")
    seconds = time.monotonic() - started
    if cache is not None:
        write_atomic(cache, json.dumps({"settings": settings, "seconds": seconds, "rows": rows}))
    return rows, seconds


def _code_bpb(evaluation: EvaluationConfig, out_dir: Path, keep: bool) -> CodeBpb:
    files = evaluation.code_files
    documents = code_documents(files, evaluation.code_bytes) if evaluation.code_bytes else []
    what = f"{files or 'proxycomp/ (its own sources)'}, {sum(map(len, documents)) / 1000:.0f} kB"
    return CodeBpb(out_dir, documents, what, keep)


def run(config: RLConfig, args: RunArgs) -> int:
    from lightning.fabric import Fabric

    from proxycomp.checkpoint import AtomicCheckpointIO, lm_from_checkpoint, read_checkpoint, spm_model_of

    started = time.monotonic()
    ckpt, out_dir, resume = args.ckpt, args.out, args.resume
    checkpoint = out_dir / "checkpoints" / "last.ckpt"
    if resume and not checkpoint.is_file():
        raise RLConfigError(f"--resume: no checkpoint at {checkpoint}; run without --resume to start (a warm start "
                            "killed midway goes on by itself)")
    if not resume and checkpoint.exists():
        raise RLConfigError(f"--out {out_dir} already holds a run; pass --resume to continue it "
                            "or choose another --out")
    tasks, eval_sets = train_and_evaluation_tasks(config)
    # A missing or damaged --ckpt stops here, before OUT holds anything. The sampler decodes with SDPA over a KV
    # cache; scoring with the same attention and embedding code keeps the trainer/rollout probability ratio at
    # rounding level (a Triton/TF32 path would trip mismatch rejection).
    saved = read_checkpoint(ckpt)
    base = BaseModel(lm_from_checkpoint(saved, ckpt, attn_backend="sdpa", embed_backend="torch"),
                     saved["hyper_parameters"], spm_model_of(saved))
    code = _code_bpb(config.evaluation, out_dir, keep=resume)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "config.json", json.dumps(dataclasses.asdict(config), indent=2))

    precision = config.fabric.precision or ("bf16-mixed" if torch.cuda.is_available() else "32-true")
    fabric = Fabric(accelerator=config.fabric.accelerator, devices=1, precision=precision,
                    plugins=[AtomicCheckpointIO()])
    fabric.seed_everything(config.seed)
    torch.set_float32_matmul_precision(config.fabric.matmul_precision)
    module = fabric.setup_module(base.lm.model.train())
    policy = ByteLMPolicy(module, max_context=config.max_context, decode=config.decode,
                          gpu_turn=gpu_turn(fabric.device))
    pool = open_pool(config.gym.workers, config.gym.ray_address)

    def evaluator(size: str) -> Evaluator:  # one pool serves every problem size
        return Evaluator(pool, EvalConfig(size=size, correct_trials=config.gym.correct_trials,
                                          timeout_s=config.gym.timeout_s))

    try:
        train_gym = evaluator(config.gym.size)
        if not resume:
            code.measure("initial (--ckpt)", base.lm.model)
        warm_model = out_dir / "warmstart" / "model.ckpt"
        if not resume and warm_model.is_file():
            base.load_into(module, fabric, warm_model)
            print(f"warm start: reusing {warm_model}", flush=True)
        elif not resume and config.warmstart.steps > 0:
            _warm_start(config, fabric, policy, base, tasks, train_gym, out_dir)
        # The policy is the warm start itself until RL or a resumed checkpoint changes it.
        warm_dir = warm_model.parent if not resume and warm_model.is_file() else None
        if not resume:
            code.measure("before RL" if warm_dir is None else "before RL (after SFT)", base.lm.model)
        if args.warmstart_only:
            _before_rl(config, policy, evaluator, eval_sets, warm_dir)
            print(f"warm start only: {warm_model} and its evaluation before RL", flush=True)
            return 0
        optimizer = fabric.setup_optimizers(torch.optim.AdamW(
            module.parameters(), lr=config.algorithm.lr, weight_decay=config.algorithm.weight_decay))
        trainer = RLTrainer(fabric=fabric, policy=policy, optimizer=optimizer, evaluator=train_gym, tasks=tasks,
                            rollout=config.rollout, algorithm=config.algorithm, out_dir=out_dir,
                            tasks_per_step=config.tasks_per_step, seed=config.seed, save_every=config.save_every,
                            hyper_parameters=base.hyper_parameters, spm_model=base.spm_model)
        before_path = out_dir / "eval_before.json"
        if resume:
            trainer.load(checkpoint)
            print(f"resumed at step {trainer.step} from {checkpoint}", flush=True)
        else:
            trainer.log.truncate(0)  # rows left by a run killed before its first checkpoint
        evaluation_s = None
        if resume and before_path.is_file():  # a fresh run re-measures, or reuses its warm start's rows
            rows_before = json.loads(before_path.read_text())
        else:
            rows_before, evaluation_s = _before_rl(config, policy, evaluator, eval_sets, warm_dir)
            write_atomic(before_path, json.dumps(rows_before))
        deadline = None
        if config.max_time_s is not None:  # room for the after-RL evaluation: as long as the one before, or a step
            deadline = started + config.max_time_s - (evaluation_s or trainer.longest_step_s)
        trainer.fit(config.steps, deadline)
        if trainer.step < config.steps:
            print(f"stopped at step {trainer.step} of {config.steps}: max_time_s={config.max_time_s:g} leaves no room "
                  "for another step and the evaluation; --resume goes on", flush=True)
            if trainer.step == 0:
                return 0
        rows_after = _evaluate(config, policy, evaluator, eval_sets, f"after {trainer.step} steps")
        write_atomic(out_dir / "eval_after.json", json.dumps(rows_after))
        code.measure(f"after {trainer.step} steps", base.lm.model)
    finally:
        pool.close()
    table = format_table([EvalRow(**r) for r in rows_before + rows_after])
    if code.figures:
        table += "\n\n" + code.table()
    write_atomic(out_dir / "eval.md", table + "\n")
    print(table, flush=True)
    return 0


def main(argv: Sequence[str]) -> int:
    if not argv:
        raise RLConfigError(f"--ckpt is required; usage: {USAGE.strip()}")
    return run(*parse_config(argv))


if __name__ == "__main__":  # `python -m proxycomp.gym_bridge.rl.cli`: the `proxycomp rl` verb, errors included
    import sys

    from proxycomp.command import run_command
    from proxycomp.gym_bridge.rl.cli import main as rl  # by name, as `proxycomp rl` loads it (not as __main__)

    sys.exit(run_command("rl", rl, sys.argv[1:]))
