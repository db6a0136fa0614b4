"""`ProxyCLI`: the LightningCLI behind `proxycomp fit` and `validate` (built by `build_cli`).

On top of LightningCLI: the checkpoint and LR-monitor callbacks, the links from the data module into the model
and the mixing schedule, atomic checkpoints, run folders (`--ckpt_path last`, `--run_name`, a resumed run logging
on in its own folder, no folder left by a failed run or by `validate`), progress as plain lines when stdout is no
terminal, where the run writes said at its start and end, a stop at a step boundary that validates and
checkpoints, `--init_from` (weights only, for a new schedule), and one-line errors for configs and checkpoints
that cannot work (a checkpoint validated on other data, GPU-only settings on a CPU among them).
"""
from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.callbacks.progress import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from proxycomp.checkpoint import DATA_STATE_KEY, AtomicCheckpointIO, init_weights, reading
from proxycomp.data import ProxyDataModule
from proxycomp.defaults import GRAD_CLIP, default_precision
from proxycomp.errors import UserError
from proxycomp.lit import ProxyLM
from proxycomp.progress import LineProgress, SparseMetricsProgressBar
from proxycomp.runs import (
    LAST,
    ResumedLogStep,
    checkpoint_step,
    continue_in_run_folder,
    continue_metrics,
    kept_if_failed,
    rename_runs,
    resolve_last,
)
from proxycomp.stopping import StopAtStepBoundary
from proxycomp.vocab import Vocabulary


# Said on every run, before anything about it (and so before a one-line error): Lightning's advertisement for its
# cloud logger, the seed and which accelerators exist; `fit`'s first line names the device it trains on.
_NOISE = ("💡 Tip", "GPU available:", "TPU available:", "HPU available:", "Seed set to")
for _name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed"):
    logging.getLogger(_name).addFilter(lambda record: not any(noise in str(record.msg) for noise in _NOISE))


def ignore_library_warnings() -> None:
    """Warnings on every run that say nothing about it (call inside warnings.catch_warnings)."""
    # A deprecation inside Lightning's own pytree helper under this torch: Lightning's to fix, not ours.
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)
    # A resumed run checkpoints into its own folder again, which is what Lightning warns about here.
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # validate writes no checkpoint, so where it would write one differs from where the checkpoint was written.
    warnings.filterwarnings("ignore", message=r"The dirpath has changed from")


class ConfigError(UserError):
    """A class in the config refused its arguments (raised while the CLI instantiates them)."""


CKPT_PATH_HELP = ("fit: resume a run from this checkpoint where it stopped (--init_from instead starts a new run from "
                  "its weights); validate: the checkpoint to score. A .ckpt written by proxycomp, or last: with a "
                  "run's config.yaml as --config that run's checkpoints/last.ckpt, with a recipe the newest "
                  "checkpoints/last.ckpt among the runs of its name (runs/<name>/*/)")


def gpu_only_setting(arch, training: bool) -> tuple[str, str] | None:
    """(the setting, its CPU alternative) of the first model setting that runs only on a CUDA GPU, when this machine
    has none; None when it can run here. Triton kernels also run in Triton's interpreter (TRITON_INTERPRET=1, slow)."""
    if torch.cuda.is_available():
        return None
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if arch.attn_backend == "flash_attn" or (arch.attn_backend == "triton" and not interpreted):
        return f"model.arch.attn_backend {arch.attn_backend}", "--model.arch.attn_backend sdpa"
    if arch.attn_backend == "flex" and training:  # FlexAttention has no backward on a CPU
        return "model.arch.attn_backend flex", "--model.arch.attn_backend sdpa"
    if arch.embed_backend == "triton" and not interpreted:
        return "model.arch.embed_backend triton", "--model.arch.embed_backend torch"
    return None


def trainer_defaults() -> dict:
    return {
        "precision": default_precision(),
        "gradient_clip_val": GRAD_CLIP,
        "log_every_n_steps": 10,
        "logger": [
            {"class_path": "lightning.pytorch.loggers.CSVLogger",
             "init_args": {"save_dir": "runs", "name": "proxycomp"}},
            {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
             "init_args": {"save_dir": "runs/tb", "name": "proxycomp"}},
        ],
    }


class ProxyCLI(LightningCLI):
    resumed_step: int | None = None  # set when fit resumes inside its own run folder

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": "val/bpb", "checkpoint.mode": "min", "checkpoint.save_last": True,
            "checkpoint.filename": "step{step:06d}", "checkpoint.auto_insert_metric_name": False,
        })
        parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
        parser.set_defaults({"lr_monitor.logging_interval": "step"})
        parser.link_arguments("data.vocab_size", "model.arch.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.vocabulary", "model.vocabulary", compute_fn=Vocabulary.to_dict,
                              apply_on="instantiate")
        parser.link_arguments("data.seq_len", "model.arch.max_seq_len")
        parser.link_arguments("trainer.max_steps", "data.mixing.total_steps")
        # Every subcommand takes it so that a run's config.yaml, which records it, reads back into validate.
        parser.add_argument(
            "--init_from", type=str | None, default=None,
            help="fit: start from the weights of this checkpoint (fit's, the RL warm start's or RL's) with a new "
                 "optimizer, schedule and data stream (--ckpt_path instead resumes a run where it stopped); "
                 "validate ignores it")
        parser.add_argument(
            "--run_name", type=str | None, default=None,
            help="the run's name: its folders are runs/<name>/version_N and runs/tb/<name>/ (it sets the name of "
                 "every CSV and TensorBoard logger); null: the recipe's logger names")

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        # Lightning's text advertises best, hpc and registry paths, which a proxycomp run has none of.
        for action in parser._actions:
            if action.dest == "ckpt_path":
                action.help = CKPT_PATH_HELP
        return parser

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        super().parse_arguments(parser, args)
        # Right after parsing, before `last` is resolved or anything is seeded or loaded, so that a call missing
        # what a run needs is told so in one line (not by the mixing schedule's "total_steps must be positive").
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        if subcommand == "validate" and not config.get("config"):
            raise UserError("validate needs the config the checkpoint was trained with: --config RUN/config.yaml "
                            "(every run folder keeps one) or the recipe")
        if subcommand == "validate" and not config.get("ckpt_path"):
            raise UserError("validate needs --ckpt_path: a .ckpt, or last for the newest run of the config's name")
        max_steps = config.trainer.max_steps
        if not config.get("config") and (max_steps is None or max_steps < 1):
            raise UserError("fit needs a recipe: --config recipes/smoke/proxy_spm.yaml or another of recipes/")
        if max_steps is None or max_steps < 1:
            raise UserError(f"trainer.max_steps is {'not set' if max_steps in (None, -1) else max_steps}: it is the "
                            "run's length, which the learning-rate and mixing schedules follow; set it in the recipe "
                            "or pass e.g. --trainer.max_steps 300")
        if subcommand == "fit" and config.get("init_from") and config.get("ckpt_path"):
            raise UserError("--init_from starts a new run from a checkpoint's weights and --ckpt_path resumes one; "
                            "pass one of them")
        if config.get("run_name"):
            rename_runs(config.trainer, config.run_name)

    def _parse_ckpt_path(self) -> None:
        # LightningCLI reads the model's hyper-parameters from --ckpt_path first: `last` is resolved, and a missing
        # or damaged file ends here, in one line, before any data is loaded.
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else None
        if config is None or config.get("ckpt_path") is None:
            return super()._parse_ckpt_path()
        if config.ckpt_path == LAST:
            config.ckpt_path = str(resolve_last(config.trainer, config.get("config")))
        path = Path(config.ckpt_path)
        with reading(path):
            super()._parse_ckpt_path()  # replaces self.config
            if subcommand == "fit" and continue_in_run_folder(self.config.fit.trainer, path) is not None:
                self.resumed_step = checkpoint_step(path)

    def before_instantiate_classes(self) -> None:
        # After the checkpoint's model settings replaced the config's, before any of it is built or data is read.
        config = self.config[self.subcommand] if self.subcommand else self.config
        refused = gpu_only_setting(config.model.arch, training=self.subcommand != "validate")
        if refused is not None:
            setting, alternative = refused
            raise UserError(f"{setting} needs a CUDA GPU and this machine has none (or TRITON_INTERPRET=1, Triton's "
                            f"slow interpreter); on a CPU pass {alternative}, or use a recipe of recipes/smoke/")

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
        if self.subcommand == "validate":
            kwargs["logger"] = False  # validate prints its figures; a run folder is for training
        callbacks = list(config.get("callbacks") or [])
        if config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
            every = config.get("log_every_n_steps") or trainer_defaults()["log_every_n_steps"]
            # A bar redrawn in place shows nothing in a file until the run ends.
            callbacks.append(SparseMetricsProgressBar(metrics_every_n_steps=every) if sys.stdout.isatty()
                             else LineProgress())
        kwargs["callbacks"] = [*callbacks, StopAtStepBoundary(), ResumedLogStep()]
        trainer = super().instantiate_trainer(**kwargs)
        if not trainer.loggers:  # no run folder: the LR monitor would refuse to run, the config has nowhere to go
            trainer.callbacks = [c for c in trainer.callbacks
                                 if not isinstance(c, (LearningRateMonitor, SaveConfigCallback))]
        if self.resumed_step is not None:
            continue_metrics(trainer.loggers, self.resumed_step)
        return trainer

    def before_fit(self) -> None:
        path = self.config_init.fit.get("init_from")
        if path:
            spm_model = init_weights(self.model, path)
            if spm_model is not None and "spm" in self.datamodule.config.views.names:
                self.datamodule.use_spm_model(spm_model)

    def before_validate(self) -> None:
        # A checkpoint scored on other documents, or in another view, than it was trained and validated on gives a
        # figure that looks like its own; `last` with a recipe may name another run of that name.
        path = self.config_init.validate.ckpt_path
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get(DATA_STATE_KEY)
        changes = self.datamodule.scored_changes(state["config"]) if state else []
        if changes:
            raise UserError(f"{path} was trained on other data than this config reads ({'; '.join(changes)}); pass "
                            "its run's config.yaml as --config, or score other files with proxycomp eval-bpb")

    def fit(self, model, **kwargs) -> None:
        trainer, ckpt_path = self.trainer, kwargs.get("ckpt_path")
        step = checkpoint_step(Path(ckpt_path)) if ckpt_path else 0
        if step >= trainer.max_steps:
            self._say(f"{ckpt_path} is at step {step}, which trainer.max_steps ({trainer.max_steps}) does not pass: "
                      "nothing to train; pass a larger --trainer.max_steps to train it further")
            return
        resuming = f"resuming {ckpt_path} at step {step}; " if ckpt_path else ""
        self._say(f"{resuming}run folder {trainer.log_dir or trainer.default_root_dir}, checkpoints in "
                  f"{self.checkpoint_dir()}; on {trainer.strategy.root_device.type}, precision {trainer.precision}")
        with kept_if_failed(trainer.loggers if trainer.is_global_zero else []):
            trainer.fit(model, **kwargs)
        saved = trainer.checkpoint_callback
        if saved is not None and saved.last_model_path:
            best = saved.best_model_path and saved.best_model_score is not None
            self._say(f"checkpoint {saved.last_model_path} at step {trainer.global_step}" + (
                f"; best by {saved.monitor}: {saved.best_model_path} ({float(saved.best_model_score):.4f})"
                if best else ""))

    def _say(self, text: str) -> None:
        """A line of `fit`'s own, on stderr beside Lightning's (stdout is the progress's), from one process."""
        if self.trainer.is_global_zero:
            print(f"fit: {text}", file=sys.stderr, flush=True)

    def checkpoint_dir(self) -> Path:
        """Where the checkpoint callback writes: its dirpath, else (as Lightning resolves it) the run folder's."""
        saved = self.trainer.checkpoint_callback
        if saved is not None and saved.dirpath:
            return Path(saved.dirpath)
        return Path(self.trainer.log_dir or self.trainer.default_root_dir) / "checkpoints"

    @property
    def interrupted(self) -> bool:
        """Whether fit stopped early because of Ctrl-C."""
        return any(isinstance(c, StopAtStepBoundary) and c.interrupted for c in self.trainer.callbacks)


def build_cli(args: Sequence[str] | None, run: bool = True):
    """The LightningCLI for `args` (a subcommand and its options; None: sys.argv); `run=False` builds only."""
    with warnings.catch_warnings():
        # LightningCLI warns whenever sys.argv holds arguments besides `args`: they are the dispatcher's own.
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        ignore_library_warnings()
        return ProxyCLI(
            ProxyLM, ProxyDataModule, args=None if args is None else list(args), run=run, seed_everything_default=0,
            trainer_defaults=trainer_defaults(), parser_kwargs={"exit_on_error": False, "allow_abbrev": False},
            save_config_kwargs={"overwrite": True},  # a resumed run writes its config into its own folder again
        )
