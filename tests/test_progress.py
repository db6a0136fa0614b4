import lightning as L
import pytest
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel

from proxycomp.progress import SparseMetricsProgressBar


class LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train/loss", out["loss"], prog_bar=True)
        return out


def test_training_metrics_are_read_every_n_steps(monkeypatch):
    reads = []
    original = ProgressBar.get_metrics

    def counting(self, trainer, pl_module):
        if trainer.training:
            reads.append(trainer.global_step)
        return original(self, trainer, pl_module)

    monkeypatch.setattr(ProgressBar, "get_metrics", counting)
    bar = SparseMetricsProgressBar(metrics_every_n_steps=4)
    trainer = L.Trainer(accelerator="cpu", max_steps=10, callbacks=[bar], logger=False, enable_checkpointing=False,
                        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(LoggingModel())
    # After the first read, only at steps that are multiples of 4 (each read of a GPU metric syncs the host).
    assert reads and all(step % 4 == 0 for step in reads[1:]) and len(reads) < 10
    assert "train/loss" in bar.get_metrics(trainer, trainer.lightning_module)


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="metrics_every_n_steps"):
        SparseMetricsProgressBar(metrics_every_n_steps=0)
