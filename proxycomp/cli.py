"""The `proxycomp` command.

    proxycomp fit|validate --config recipes/smoke/proxy_spm.yaml [--trainer.max_steps 100 ...]
    proxycomp generate --ckpt RUN/checkpoints/last.ckpt --prompt "def fib("
    proxycomp eval-bpb --ckpt RUN/checkpoints/last.ckpt --data path/to/sources
    proxycomp gym eval|tasks|bench ...
    proxycomp rl --config recipes/rl/trloo_kernel.yaml --ckpt RUN/checkpoints/last.ckpt

fit/validate go through LightningCLI (ProxyLM + ProxyDataModule). Bad input ends in one line on
stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = __doc__.split("\n\n")[1]
LIGHTNING_COMMANDS = ("fit", "validate")


class ConfigError(ValueError):
    """A class in the config refused its arguments (raised while the CLI instantiates them)."""


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad input (config, paths, files), reported as one line."""
    from jsonargparse import ArgumentError

    from proxycomp.checkpoint import CheckpointError
    from proxycomp.data import CorpusError, DataStateError, ScheduleError
    from proxycomp.evaluate import DataPathError
    from proxycomp.model import ModelConfigError
    from proxycomp.views import ViewError
    from proxycomp.vocab import VocabularyError

    return (ArgumentError, ConfigError, CheckpointError, CorpusError, DataStateError, ScheduleError, DataPathError,
            ModelConfigError, ViewError, VocabularyError)


def build_cli(args: Sequence[str] | None, run: bool = True):
    """The LightningCLI for `args` (a subcommand and its options; None: sys.argv); `run=False` builds only."""
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.callbacks.progress import ProgressBar
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

    from proxycomp.checkpoint import AtomicCheckpointIO
    from proxycomp.data import ProxyDataModule
    from proxycomp.lit import ProxyLM
    from proxycomp.progress import SparseMetricsProgressBar
    from proxycomp.vocab import Vocabulary

    class ProxyCLI(LightningCLI):
        def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
            parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
            parser.set_defaults({
                "checkpoint.monitor": "val/bpb", "checkpoint.mode": "min", "checkpoint.save_last": True,
                "checkpoint.filename": "step{step:06d}", "checkpoint.auto_insert_metric_name": False,
            })
            parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
            parser.set_defaults({"lr_monitor.logging_interval": "step"})
            parser.link_arguments("data.vocab_size", "model.vocab_size", apply_on="instantiate")
            parser.link_arguments("data.vocabulary", "model.vocabulary", compute_fn=Vocabulary.to_dict, apply_on="instantiate")
            parser.link_arguments("data.seq_len", "model.max_seq_len")
            parser.link_arguments("trainer.max_steps", "data.total_steps")

        def instantiate_classes(self) -> None:
            # A constructor that rejects its arguments means a bad config, whichever class raised it.
            try:
                super().instantiate_classes()
            except (ValueError, TypeError) as err:
                raise ConfigError(str(err)) from err

        def instantiate_trainer(self, **kwargs):
            config = self._get(self.config_init, "trainer", default={})
            if not config.get("plugins"):
                kwargs["plugins"] = [AtomicCheckpointIO()]
            callbacks = list(config.get("callbacks") or [])
            if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
                every = config.get("log_every_n_steps") or trainer_defaults["log_every_n_steps"]
                kwargs["callbacks"] = [*callbacks, SparseMetricsProgressBar(metrics_every_n_steps=every)]
            trainer = super().instantiate_trainer(**kwargs)
            if not trainer.loggers:  # `--trainer.logger false`: the LR monitor would refuse to run
                trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, LearningRateMonitor)]
            return trainer

    trainer_defaults = {
        "precision": "bf16-mixed" if torch.cuda.is_available() else "32-true",
        "gradient_clip_val": 1.0,
        "log_every_n_steps": 10,
        "logger": [
            {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "proxycomp"}},
            {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs/tb", "name": "proxycomp"}},
        ],
    }
    return ProxyCLI(
        ProxyLM, ProxyDataModule, args=None if args is None else list(args), run=run, seed_everything_default=0,
        trainer_defaults=trainer_defaults, parser_kwargs={"exit_on_error": False},
    )


def main(argv: Sequence[str] | None = None) -> int:
    from_sys_argv = argv is None  # LightningCLI then reads sys.argv itself (and warns if given both)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage:\n{USAGE}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "gym":
        from proxycomp.gym_bridge.cli import main as gym_main

        return gym_main(rest)
    if command == "rl":
        from proxycomp.gym_bridge.rl.cli import main as rl_main

        return rl_main(rest)
    if command not in (*LIGHTNING_COMMANDS, "generate", "eval-bpb"):
        print(f"proxycomp: unknown command {command!r}; use fit, validate, generate, eval-bpb, gym or rl", file=sys.stderr)
        return 2
    bad_input = user_errors()
    try:
        if command == "generate":
            from proxycomp.generate import main as generate_main

            return generate_main(rest)
        if command == "eval-bpb":
            from proxycomp.evaluate import main as evaluate_main

            return evaluate_main(rest)
        build_cli(None if from_sys_argv else argv)
        return 0
    except bad_input as err:
        message = " ".join(str(err).split())  # one line, whatever the library put in it
        print(f"proxycomp {command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
