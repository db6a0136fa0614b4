"""Run folders: `<save_dir>/<name>/<version>/` of a run's first logger, where its metrics, config, data artifacts
and checkpoints go (Lightning's layout), and what `fit` makes of them:

- `--ckpt_path last` is the run's own `checkpoints/last.ckpt` when --config is a run's config.yaml, else the newest
  among the runs of that name;
- resuming from a checkpoint inside a run folder logs on in that folder: every logger gets its version, and
  metrics.csv keeps its rows from before the checkpoint's step (Lightning's CSV logger would delete the file);
- a run that ends in an error before writing a checkpoint leaves the run folders as they were: one it created is
  removed with the empty folders above it that it created, an existing one (a resume that failed) gets its files
  back.
"""
from __future__ import annotations

import contextlib
import csv
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from proxycomp.errors import UserError
from proxycomp.files import write_atomic

LAST = "last"
RUN_LOGGERS = ("CSVLogger", "TensorBoardLogger")  # loggers whose folder is <save_dir>/<name>/<version>


class RunFolderError(UserError):
    """A checkpoint named by its run that cannot be found."""


def _loggers(trainer_config) -> list:
    """The logger entries (class_path, init_args) of a parsed trainer config; none for `logger: false`."""
    logger = trainer_config.get("logger")
    if isinstance(logger, bool) or logger is None:
        return []
    return list(logger) if isinstance(logger, list) else [logger]


def run_root(trainer_config) -> Path | None:
    """`<save_dir>/<name>` of the first logger: where the runs of this name keep their versions."""
    loggers = _loggers(trainer_config)
    if not loggers or loggers[0].class_path.rsplit(".", 1)[-1] not in RUN_LOGGERS:
        return None
    args = loggers[0].init_args
    name = args.get("name", "lightning_logs")
    return Path(args.save_dir) / name if name else Path(args.save_dir)


def rename_runs(trainer_config, name: str) -> None:
    """Set the name of every run logger (CSV, TensorBoard), so that the run's folders are `<save_dir>/<name>/`."""
    for logger in _loggers(trainer_config):
        if logger.class_path.rsplit(".", 1)[-1] in RUN_LOGGERS:
            logger.init_args.name = name


def config_run(trainer_config, config_files) -> Path | None:
    """The run folder a config file given with --config belongs to: `<run root>/<version>/config.yaml`, as `fit`
    writes it (a recipe is no run's); None if none is."""
    root = run_root(trainer_config)
    for path in map(Path, config_files or []):
        if root is not None and path.name == "config.yaml" and path.resolve().parents[1] == root.resolve():
            return path.parent
    return None


def resolve_last(trainer_config, config_files) -> Path:
    """What `--ckpt_path last` names: the run's own `last.ckpt` when --config is a run's config.yaml, else the newest
    `last.ckpt` of the runs under the first logger's root (by modification time: the run trained most recently)."""
    run = config_run(trainer_config, config_files)
    if run is not None:
        path = run / "checkpoints" / f"{LAST}.ckpt"
        if not path.is_file():
            raise RunFolderError(f"--ckpt_path last: the run of {run / 'config.yaml'} has no checkpoints/{LAST}.ckpt "
                                 "(it stopped before its first checkpoint); pass a checkpoint's path")
        return path
    root = run_root(trainer_config)
    if root is None:
        raise RunFolderError("--ckpt_path last needs a CSV or TensorBoard logger first in trainer.logger (its folder "
                             "holds the runs); pass the checkpoint's path")
    found = sorted(root.glob(f"*/checkpoints/{LAST}.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RunFolderError(f"--ckpt_path last: no run under {root} has a checkpoints/{LAST}.ckpt; start without "
                             "--ckpt_path or pass a checkpoint's path")
    return found[-1]


def continue_in_run_folder(trainer_config, ckpt_path: Path) -> int | str | None:
    """Point every run logger at the version folder `ckpt_path` lies in, if it lies in one of this run's name;
    returns that version."""
    root = run_root(trainer_config)
    ckpt_path = ckpt_path.resolve()
    if root is None or ckpt_path.parent.name != "checkpoints" or ckpt_path.parents[2] != root.resolve():
        return None
    version: int | str = ckpt_path.parents[1].name
    if version.startswith("version_") and version[8:].isdigit():
        version = int(version[8:])  # the loggers name it version_N again
    for logger in _loggers(trainer_config):
        if logger.class_path.rsplit(".", 1)[-1] in RUN_LOGGERS:
            logger.init_args.version = version
    return version


class ContinuedMetrics(ExperimentWriter):
    """The CSV logger's writer for a run resumed at step `step`: at its first save it drops the rows of metrics.csv
    logged from that step on (Lightning logs the metrics of step s + 1 at s; those rows belong to the stretch the
    resumed run trains again), then goes on appending."""

    def __init__(self, log_dir: str, step: int) -> None:
        self.resumed_step, self._cut = step, False
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:  # Lightning's deletes metrics.csv; this one only reads its columns
        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])
        self._cut = path.is_file()

    def save(self) -> None:
        if self._cut and self.metrics:
            self._cut = False
            with open(self.metrics_file_path, newline="") as f:
                rows = [row for row in csv.DictReader(f) if row.get("step") and float(row["step"]) < self.resumed_step]
            with open(self.metrics_file_path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
                writer.writeheader()
                writer.writerows(rows)
        super().save()


def continue_metrics(loggers: list, step: int) -> None:
    """Let each CSV logger continue its metrics.csv from `step` on (call before the loggers are used)."""
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            logger._experiment = ContinuedMetrics(logger.log_dir, step)


class ResumedLogStep(L.Callback):
    """The step a metric is logged at is Lightning's count of batches that stepped. A checkpoint saves that count
    one short of its step, and on resume Lightning adds the missing one only when the checkpoint was written at the
    end of a training batch: one written by the step's validation (as every run's last is) resumed a step early, at
    steps the run had already used. The uninterrupted run logs step k's metrics at k, and with one optimizer step
    per batch that count is the global step: this sets it there before each batch (after Lightning's own fix-up,
    which runs after on_train_start; from the first batch on the two stay equal)."""

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step


@contextlib.contextmanager
def kept_if_failed(loggers: list) -> Iterator[None]:
    """Run the block; if it raises before writing a checkpoint, put the loggers' run folders back as they were: one
    it created is removed (with the empty folders it created above it), the files at the top of an existing one
    (config, metrics, manifest) get their contents back and the files it added there go."""
    folders = [Path(logger.log_dir) for logger in loggers if getattr(logger, "log_dir", None)]
    before = {folder: {f: f.read_bytes() for f in folder.iterdir() if f.is_file()} if folder.is_dir() else None
              for folder in folders}
    # The folders above a new run folder that did not exist either (runs/<name>/, runs/tb/): removed with it.
    created = {folder: [p for p in folder.parents if not p.exists()] for folder in folders}
    started = time.time()
    try:
        yield
    except BaseException:
        new_checkpoints = [p for folder in folders if folder.is_dir() for p in folder.rglob("*.ckpt")
                           if p.stat().st_mtime >= started]
        if not new_checkpoints:
            for folder, files in before.items():
                if files is None:
                    shutil.rmtree(folder, ignore_errors=True)
                    for parent in created[folder]:  # innermost first; another run may have written there since
                        with contextlib.suppress(OSError):
                            parent.rmdir()
                    continue
                for f in folder.iterdir():
                    if f.is_file() and f not in files:
                        f.unlink()
                for f, data in files.items():
                    if not f.is_file() or f.read_bytes() != data:
                        write_atomic(f, data)
        raise


def checkpoint_step(path: Path) -> int:
    """The optimizer step a Lightning checkpoint was written at (read without loading its tensors)."""
    checkpoint: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return int(checkpoint.get("global_step", 0))
