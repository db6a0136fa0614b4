"""The `proxycomp fit` progress bar: Lightning's RichProgressBar with training metrics read every n steps.

Reading a metric that lives on the GPU (the loss) synchronizes the host with the device. Lightning's bars read
them after every batch, which stops the CPU from queueing the next step while the GPU works; this bar reads
them as often as the loggers do and shows the last values in between. The step counter still moves every batch.
"""
from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


class SparseMetricsProgressBar(RichProgressBar):
    def __init__(self, metrics_every_n_steps: int = 25, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if metrics_every_n_steps < 1:
            raise ValueError(f"metrics_every_n_steps must be >= 1, got {metrics_every_n_steps}")
        self.metrics_every_n_steps = metrics_every_n_steps
        self._shown: dict[str, Any] | None = None

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        if trainer.training and self._shown is not None and trainer.global_step % self.metrics_every_n_steps:
            return self._shown
        self._shown = super().get_metrics(trainer, pl_module)
        return self._shown
