"""The `proxycomp fit` progress: on a terminal, Lightning's RichProgressBar showing training metrics read every n steps.

Reading a metric that lives on the GPU (the loss) synchronizes the host with the device, which stops the CPU from
queueing the next step while the GPU works. Lightning converts every metric logged with `prog_bar=True` to a Python
number after every batch, bar or no bar (its logger connector's `on_batch_end`), so training metrics are logged
without `prog_bar`; this bar reads the ones named in `step_metrics` from the callback metrics as often as the
loggers write (every n steps) and shows the last values in between. The step counter still moves every batch.

The bar counts optimizer steps out of trainer.max_steps, also after a resume (Lightning's counts the batches of
the current epoch out of those left, and names an epoch out of max_epochs - 1, which is -2 for a run set by steps).
Elsewhere (a log file, CI) plain lines (`LineProgress`).
"""
from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar


class ThroughputWindow:
    """Symbols per second over the training steps since the last reported figure. One step's host interval is no
    measure of it under an asynchronous GPU: the host runs steps ahead of the device and waits for it at syncs
    (Lightning's logging among them), so the interval of a step that waits holds the device time of the steps queued
    before it (the policy run of 2026-12-05 logged a median ~0.42M symbols/s as one step's interval while its progress
    lines read ~1.1M over 10 s windows). A window of steps amortizes those waits as the run does."""

    def __init__(self) -> None:
        self._start: float | None = None  # the host time at which the window's first step began
        self._symbols = 0  # symbols of the steps begun since then, up to the current one

    def reset(self) -> None:
        """Opens the next window at the next step (after validation or an epoch end, which are not training)."""
        self._start = None

    def step(self, now: float, symbols: int, report: bool) -> float | None:
        """A step of `symbols` begins at host time `now`; with `report`, the rate of the steps begun before it in
        this window (None for the first step of a window), which then closes and a new one opens here."""
        rate = None
        if self._start is not None and report and now > self._start:
            rate = self._symbols / (now - self._start)
        if self._start is None or rate is not None:
            self._start, self._symbols = now, 0
        self._symbols += symbols
        return rate


class SparseMetricsProgressBar(RichProgressBar):
    def __init__(self, metrics_every_n_steps: int = 25, step_metrics: Sequence[str] = ("train/loss",),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if metrics_every_n_steps < 1:
            raise ValueError(f"metrics_every_n_steps must be >= 1, got {metrics_every_n_steps}")
        self.metrics_every_n_steps = metrics_every_n_steps
        self.step_metrics = tuple(step_metrics)
        self._shown: dict[str, Any] | None = None

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        if not (trainer.training and self._shown is not None and trainer.global_step % self.metrics_every_n_steps):
            logged = trainer.callback_metrics
            self._shown = {name: float(logged[name]) for name in self.step_metrics if name in logged}
        return {**super().get_metrics(trainer, pl_module), **self._shown}

    @property
    def total_train_batches(self) -> int | float:
        return self.trainer.max_steps if self.trainer.max_steps > 0 else super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'step':{len(self.validation_description)}}"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)  # shows the step


class LineProgress(ProgressBar):
    """`proxycomp fit`'s progress when stdout is no terminal (`> log`, nohup, CI), where the bar above would show
    nothing until the run ends: a plain line at the first step, every `every_s` seconds, after each validation and at
    the end, with the step out of trainer.max_steps, symbols per second since the last line, the time left at that
    rate and the training loss (read only when a line is printed, so at most one host-device sync per line)."""

    def __init__(self, every_s: float = 10.0) -> None:
        super().__init__()
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.every_s = every_s
        self._enabled = True
        self._last: tuple[float, int] | None = None  # (time, step) of the last line
        self._symbols = 0  # trained on since the last line (all processes)

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _line(self, trainer: L.Trainer, text: str) -> None:
        if self._enabled:
            print(f"step {trainer.global_step}/{trainer.max_steps}  {text}".rstrip(), flush=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._symbols += batch["input_ids"].numel() * trainer.world_size
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= self.every_s:
            self._line(trainer, self._figures(trainer, now))

    def _figures(self, trainer: L.Trainer, now: float) -> str:
        figures = []
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            figures.append(f"loss {float(loss):.3f}")
        if self._last is not None and now > self._last[0] and trainer.global_step > self._last[1]:
            seconds, steps = now - self._last[0], trainer.global_step - self._last[1]
            left = max(trainer.max_steps - trainer.global_step, 0) * seconds / steps
            figures += [f"{self._symbols / seconds:,.0f} symbols/s", f"ETA {datetime.timedelta(seconds=round(left))}"]
        self._last, self._symbols = (now, trainer.global_step), 0
        return "  ".join(figures)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bpb = trainer.callback_metrics.get("val/bpb")
        if trainer.state.fn == "fit" and not trainer.sanity_checking and bpb is not None:
            self._line(trainer, f"val/bpb {float(bpb):.4f}")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._last is None or self._last[1] != trainer.global_step:
            self._line(trainer, self._figures(trainer, time.monotonic()))
