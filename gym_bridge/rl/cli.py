"""`proxycomp rl`: warm start, held-out evaluation, RL, held-out evaluation again.

    proxycomp rl --config recipes/rl/trloo_kernel.yaml --ckpt RUN/checkpoints/last.ckpt [--out DIR] [--resume]
                 [--algorithm.estimator grpo] [--steps 50] [...any config field...]
    proxycomp rl --config ... --ckpt ... --out DIR --warmstart_only   # only OUT/warmstart/ (model, evaluation)

The config is the `RLConfig` dataclass tree, read from YAML by jsonargparse; any field can be overridden
on the command line with its dotted name. An unknown key is a one-line error naming it. On CPU the gym's
Triton kernels run in the interpreter (TRITON_INTERPRET=1 is set for the workers).

Every checkpoint it writes (OUT/warmstart/model.ckpt, OUT/checkpoints/last.ckpt) holds the base model's
hyper-parameters and tokenizer besides the weights, as one of `fit` does, so `proxycomp generate`, `eval-bpb` and
`fit --init_from` read it. A warm start killed midway goes on from OUT/warmstart/state.ckpt when run again.
With max_time_s, an evaluation that would run past it stops between its chunks (exit status 0); --resume, or the
same --warmstart_only command, goes on from the chunks kept.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from proxycomp.command import command_parser
from proxycomp.files import write_atomic

from ..evaluator import Evaluator
from ..policy import ByteLMPolicy
from ..pool import gpu_turn
from .code_bpb import CodeBpb
from .config import RLConfig, RLConfigError, RunArgs
from .evaluation import HeldOut, OutOfTime
from .trainer import RLTrainer
from .warmstart import BaseModel, WarmStarter

USAGE = __doc__.split("\n\n")[1]


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


def parse_config(argv: Sequence[str]) -> tuple[RLConfig, RunArgs]:
    """(config, run arguments); bad input raises RLConfigError with one line."""
    from jsonargparse import ArgumentError

    parser = _parser()
    try:
        namespace = parser.instantiate_classes(parser.parse_args(list(argv)))
        config = RLConfig(**{f.name: namespace[f.name] for f in dataclasses.fields(RLConfig)})
    except ArgumentError as err:
        raise RLConfigError(" ".join(str(err).split())) from None
    args = RunArgs(Path(namespace.ckpt), Path(namespace.out), bool(namespace.resume), bool(namespace.warmstart_only))
    if args.warmstart_only and (args.resume or config.warmstart.steps == 0):
        raise RLConfigError("--warmstart_only needs warmstart.steps > 0 and no --resume")
    return config, args


def run(config: RLConfig, args: RunArgs) -> int:
    started, out_dir, resume = time.monotonic(), args.out, args.resume
    checkpoint = args.checkpoint()
    base = BaseModel.read(args.ckpt)  # a missing or damaged --ckpt stops here, before OUT holds anything
    context = config.context(base.lm.model.config.max_seq_len)  # so is a context past what it was pretrained at
    evaluated = config.evaluated_settings()  # what keys the before-RL rows kept beside a warm start
    tasks = config.load_tasks()
    code = CodeBpb.of_files(config.evaluation.code_files, config.evaluation.code_bytes, base.lm.model, out_dir,
                           keep=resume)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "config.json", json.dumps(dataclasses.asdict(config), indent=2))
    fabric = config.fabric.build(config.seed)
    policy = ByteLMPolicy(fabric.setup_module(base.lm.model.train()), max_context=context,
                          decode=config.decode, gpu_turn=gpu_turn(fabric.device))
    gym = Evaluator.open(config.gym.eval, config.gym.workers, config.gym.ray_address)
    try:
        warm_dir = None  # the policy is the warm start itself until RL or a resumed checkpoint changes it
        if not resume:
            code.measure("initial (--ckpt)")
            warm = WarmStarter(fabric=fabric, policy=policy, base=base, config=config.warmstart,
                               rollout=config.rollout, out_dir=out_dir, seed=config.seed)
            warm_dir = warm.start(tasks.sft, gym)
            code.measure("before RL" if warm_dir is None else "before RL (after SFT)")
        held_out = HeldOut(tasks.evaluated, gym, config.rollout, config.evaluation, evaluated, out_dir, code,
                           deadline=None if config.max_time_s is None else started + config.max_time_s)
        rows_before, evaluation_s = held_out.before_rl(policy, warm_dir, resume, keep=not args.warmstart_only)
        if args.warmstart_only:
            print(f"warm start only: {warm.model_path} and its evaluation before RL", flush=True)
            return 0
        trainer = RLTrainer(fabric=fabric, policy=policy, evaluator=gym,
                            tasks=tasks.rl, rollout=config.rollout, algorithm=config.algorithm, out_dir=out_dir,
                            tasks_per_step=config.tasks_per_step, seed=config.seed, save_every=config.save_every,
                            hyper_parameters=base.hyper_parameters, spm_model=base.spm_model)
        if resume:
            trainer.load(checkpoint)
            print(f"resumed at step {trainer.step} from {checkpoint}", flush=True)
        else:
            trainer.log.truncate(0)  # rows left by a run killed before its first checkpoint
        deadline, fits = None, True
        if config.max_time_s is not None:
            # Room for the after-RL evaluation (as long as the one before) where it fits in what is left. One that
            # does not (a chain of device calls) waits for the last step, so the steps take the time, less a step.
            end = started + config.max_time_s
            fits = evaluation_s is not None and time.monotonic() + evaluation_s <= end
            deadline = end - (evaluation_s if fits else trainer.longest_step_s)
        trainer.fit(config.steps, deadline)
        if trainer.step < config.steps:
            stopped = (f"stopped at step {trainer.step} of {config.steps}: max_time_s={config.max_time_s:g} leaves "
                       "no room")
            if not fits:
                print(f"{stopped} for another step, nor for the evaluation, which waits for the last step; --resume "
                      "goes on", flush=True)
                return 0
            print(f"{stopped} for another step and the evaluation; --resume goes on", flush=True)
            if trainer.step == 0:
                return 0
        held_out.after_rl(policy, trainer.step, rows_before)
    except OutOfTime as stopped:
        print(f"{stopped}; its finished chunks are kept, and running again goes on from them", flush=True)
    finally:
        gym.close()
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
