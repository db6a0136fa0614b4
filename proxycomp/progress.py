"""The `proxycomp fit` progress bar: Lightning's RichProgressBar showing training metrics read every n steps.

Reading a metric that lives on the GPU (the loss) synchronizes the host with the device, which stops the CPU from
queueing the next step while the GPU works. Lightning converts every metric logged with `prog_bar=True` to a Python
number after every batch, bar or no bar (its logger connector's `on_batch_end`), so training metrics are logged
without `prog_bar`; this bar reads the ones named in `step_metrics` from the callback metrics as often as the
loggers write (every n steps) and shows the last values in between. The step counter still moves every batch.

The bar counts optimizer steps out of trainer.max_steps, also after a resume (Lightning's counts the batches of
the current epoch out of those left, and names an epoch out of max_epochs - 1, which is -2 for a run set by steps).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


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
