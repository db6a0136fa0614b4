import re

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.utils.data import DataLoader

from proxycomp.progress import LineProgress, SparseMetricsProgressBar


class LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train/loss", out["loss"])  # not prog_bar: Lightning would convert it every batch
        return out


def test_step_metrics_are_read_from_the_callback_metrics_every_n_steps():
    """Shown values change only at multiples of n; in between the bar repeats the last read."""
    seen = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append((trainer.global_step, bar.get_metrics(trainer, pl_module)["train/loss"]))

    bar = SparseMetricsProgressBar(metrics_every_n_steps=3)
    trainer = L.Trainer(accelerator="cpu", max_steps=7, callbacks=[bar, Watch()], logger=False,
                        enable_checkpointing=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0)
    trainer.fit(LoggingModel())
    for (step, value), (_, previous) in zip(seen[1:], seen):
        assert (value == previous) == bool(step % 3), (step, value, previous)


def test_the_bar_counts_steps_out_of_max_steps_also_after_a_resume(tmp_path):
    """Lightning's bar named "Epoch 0/-2" for a run set by steps and counted 40/19 after a resume at step 21."""
    shown = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            task = bar.progress.tasks[bar.train_progress_bar_id]
            shown.append((task.description.strip(), task.completed, task.total))

    def fit(steps, ckpt_path=None):
        trainer = L.Trainer(accelerator="cpu", max_steps=steps, callbacks=[bar, Watch()], logger=False,
                            enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
                            default_root_dir=tmp_path)
        trainer.fit(LoggingModel(), ckpt_path=ckpt_path)
        return trainer

    bar = SparseMetricsProgressBar()
    fit(3).save_checkpoint(tmp_path / "three.ckpt")
    bar = SparseMetricsProgressBar()
    shown.clear()
    fit(5, tmp_path / "three.ckpt")
    assert shown == [("step", 4, 5), ("step", 5, 5)]


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="metrics_every_n_steps"):
        SparseMetricsProgressBar(metrics_every_n_steps=0)


class SymbolsModel(LoggingModel):
    """Batches as proxycomp's data module makes them: a dict holding the input ids (4 per row)."""

    def train_dataloader(self):
        rows = [{"input_ids": torch.zeros(4, dtype=torch.long), "x": torch.randn(32)} for _ in range(64)]
        return DataLoader(rows, batch_size=2)

    def training_step(self, batch, batch_idx):
        return super().training_step(batch["x"], batch_idx)


def test_lines_for_a_log_file_say_step_rate_time_left_and_loss(capsys):
    """With stdout in a file, the bar showed nothing until the run ended; the lines come as the run goes."""
    trainer = L.Trainer(accelerator="cpu", max_steps=6, val_check_interval=3, limit_val_batches=1,
                        num_sanity_val_steps=0, callbacks=[LineProgress(every_s=1e-9)], logger=False,
                        enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(SymbolsModel())
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"step 1/6  loss \d+\.\d{3}", lines[0]), lines
    rates = [line for line in lines[1:] if "val/bpb" not in line]
    assert [int(line.split()[1].split("/")[0]) for line in rates] == [2, 3, 4, 5, 6], lines
    for line in rates:  # 8 symbols a step (2 rows of 4)
        assert re.fullmatch(r"step \d/6  loss \d+\.\d{3}  [\d,]+ symbols/s  ETA \d+:\d\d:\d\d", line), line
    assert rates[-1].endswith("ETA 0:00:00")


def test_throughput_is_over_the_steps_between_reported_figures():
    """A step that waits for the device (here the third, 0.5 s) does not make the figure: the window's steps do."""
    from proxycomp.progress import ThroughputWindow

    window, now, rates = ThroughputWindow(), 0.0, []
    for interval, report in [(0.1, False), (0.1, False), (0.5, False), (0.1, True), (0.1, False), (0.1, True)]:
        rates.append(window.step(now, 100, report))
        now += interval
    assert rates[:3] == [None] * 3 and rates[4] is None
    assert rates[3] == pytest.approx(300 / 0.7) and rates[5] == pytest.approx(200 / 0.2)
    window.reset()  # validation: its time is no step's
    now += 5.0
    assert window.step(now, 100, True) is None  # the first step of a window has nothing before it to measure
    assert window.step(now + 0.1, 100, True) == pytest.approx(1000)
