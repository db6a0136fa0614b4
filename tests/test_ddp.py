"""Several processes on CPU: DDP pretraining through the real CLI (gloo) against one process at the same global
batch, the rank sharding of the data streams, and the gym pool's one-worker-per-GPU pinning."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from proxycomp.data import CURSOR_KEY, CorpusConfig, MixingSchedule, ProxyDataModule, ReplayStream, TrainStream
from proxycomp.data.corpus import CorpusError
from proxycomp.data.datamodule import DataStateError
from proxycomp.gym_bridge import EvalConfig, LocalPool
from proxycomp.gym_bridge.config import Job
from proxycomp.gym_bridge.pool import visible_gpus
from proxycomp.views import RawView, ViewConfig, serialize_views
from proxycomp.vocab import RAW_OFFSET

DOCS = [(f"def f{i}(x):\n    return x * {i}\n" * (1 + i % 4)).encode() for i in range(30)]


def take(loader, n: int) -> list[dict[str, torch.Tensor]]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


def assert_rows_split(whole: list[dict], halves: tuple[list[dict], list[dict]]) -> None:
    """Each batch of one process is rank 0's batch stacked on rank 1's; the cursors are the same on all three."""
    assert len(whole) == len(halves[0]) == len(halves[1])
    for full, first, second in zip(whole, *halves):
        assert full.keys() == first.keys() == second.keys()
        for key in full:
            if key == CURSOR_KEY:
                assert torch.equal(full[key], first[key]) and torch.equal(full[key], second[key])
            else:
                assert torch.equal(full[key], torch.cat([first[key], second[key]])), key


@pytest.mark.parametrize("workers", [0, 2])
def test_each_rank_trains_on_its_rows_of_the_single_process_batches(workers):
    def loader(batch_size: int, **rank) -> DataLoader:
        stream = TrainStream(DOCS, ViewConfig(("raw", "zstd")), None, MixingSchedule("paper", total_steps=6), 24,
                             batch_size, seed=3, **rank)
        return DataLoader(stream, batch_size=None, num_workers=workers)

    # 6 steps cross the paper schedule's warmup, so the step each rank derives must match too.
    halves = (take(loader(2, rank=0, world_size=2), 6), take(loader(2, rank=1, world_size=2), 6))
    assert_rows_split(take(loader(4), 6), halves)


def test_replay_ranks_split_each_step_and_pad_the_last_one_alike():
    view = RawView(RAW_OFFSET)
    symbols = np.concatenate([serialize_views([("raw", view.encode_array(d))]) for d in DOCS[:7]])

    def batches(stream: ReplayStream) -> list[dict]:  # a replay cursor counts the rank's own windows: drop it
        return [{k: v for k, v in batch.items() if k != CURSOR_KEY} for batch in stream]

    whole = batches(ReplayStream(symbols, 16, 4))
    halves = tuple(batches(ReplayStream(symbols, 16, 2, rank=r, world_size=2)) for r in (0, 1))
    assert ReplayStream(symbols, 16, 2, world_size=2).num_batches == len(whole) > 2
    assert_rows_split(whole, halves)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        TrainStream(DOCS, ViewConfig(("raw",)), None, MixingSchedule("byte"), 16, 2, seed=0, rank=2, world_size=2)


@pytest.fixture
def ddp_datamodule(tmp_path):
    """A data module attached to a 2-process DDP Trainer that has not launched (this process is rank 0)."""
    for i, doc in enumerate(DOCS):
        (tmp_path / f"pkg{i % 6}").mkdir(exist_ok=True)
        (tmp_path / f"pkg{i % 6}" / f"m{i}.py").write_bytes(doc * 3)

    def make(**overrides) -> ProxyDataModule:
        args = dict(seq_len=32, batch_size=2, num_workers=0, artifacts_dir=str(tmp_path / "art"))
        corpus = CorpusConfig("folder", str(tmp_path), val_fraction=0.3, min_bytes=10)
        dm = ProxyDataModule(corpus, ViewConfig(("raw", "zstd")), **{**args, **overrides})
        dm.trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
        dm.setup("fit")
        return dm

    return make


def test_validation_windows_are_split_between_ranks_without_repeats(ddp_datamodule):
    loader = ddp_datamodule(val_windows=5).val_dataloader()
    assert list(loader.sampler) == [0, 2, 4]
    with pytest.raises(CorpusError, match="1 windows, fewer than the 2 processes; raise data.val_windows"):
        ddp_datamodule(val_windows=1).val_dataloader()


def test_resume_on_another_number_of_processes_is_refused(ddp_datamodule):
    state = ddp_datamodule().state_dict()
    assert state["world_size"] == 2
    single = ddp_datamodule()
    single.trainer = None
    with pytest.raises(DataStateError, match="written by 2 training processes and this run has 1"):
        single.load_state_dict(state)


# ---- the real CLI: 1 process with batch 4 against 2 gloo processes with batch 2 -----------------------------
CONFIG = """
seed_everything: 0
trainer:
  accelerator: cpu
  max_steps: 4
  val_check_interval: 4
  num_sanity_val_steps: 0
  log_every_n_steps: 1
  enable_progress_bar: false
  logger:
    - class_path: lightning.pytorch.loggers.CSVLogger
      init_args: {{save_dir: {run}, name: ddp}}
checkpoint:
  monitor: null
  save_top_k: -1
  every_n_train_steps: 2
model:
  arch: {{d_model: 32, n_layers: 1, n_heads: 2}}
  optim: {{lr: 3.0e-3, warmup_steps: 2}}
data:
  corpus: {{source: python-sources, max_bytes: 3000, max_documents: 60}}
  views: {{names: [raw, spm], spm_vocab_size: 400}}
  seq_len: 96
  val_windows: 5
  num_workers: 1
"""


def fit(tmp_path: Path, name: str, devices: int, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    run = tmp_path / name
    config = tmp_path / f"{name}.yaml"
    config.write_text(textwrap.dedent(CONFIG).format(run=run))
    args = ["fit", "--config", str(config), "--trainer.devices", str(devices), "--data.batch_size", str(4 // devices),
            "--trainer.strategy", "ddp" if devices > 1 else "auto", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "proxycomp.cli", *args], capture_output=True, text=True, env=env,
                          timeout=240, cwd=tmp_path)
    return done, run / "ddp" / "version_0"


def metrics(log_dir: Path) -> tuple[dict[int, float], float]:
    """Training loss per step, and the last val/bpb, from the CSV log (rank 0 writes it)."""
    losses, bpb = {}, float("nan")
    with open(log_dir / "metrics.csv") as fh:
        for row in csv.DictReader(fh):
            if row["train/loss"]:
                losses[int(row["step"])] = float(row["train/loss"])
            if row["val/bpb"]:
                bpb = float(row["val/bpb"])
    return losses, bpb


@pytest.mark.slow
def test_two_gloo_processes_follow_the_single_process_loss_curve_and_resume_exactly(tmp_path):
    one, one_dir = fit(tmp_path, "one", 1)
    assert one.returncode == 0, one.stderr[-3000:]
    two, two_dir = fit(tmp_path, "two", 2)
    assert two.returncode == 0, two.stderr[-3000:]
    one_loss, one_bpb = metrics(one_dir)
    two_loss, two_bpb = metrics(two_dir)
    assert sorted(one_loss) == sorted(two_loss) == [0, 1, 2, 3]
    # Same windows and views, same init, gradients summed in another order: equal to float rounding.
    assert two_loss == pytest.approx(one_loss, rel=1e-5)
    assert two_bpb == pytest.approx(one_bpb, rel=1e-5)

    checkpoint = two_dir / "checkpoints" / "step000002.ckpt"
    resumed, resumed_dir = fit(tmp_path, "resumed", 2, "--ckpt_path", str(checkpoint))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_loss, resumed_bpb = metrics(resumed_dir)
    assert resumed_loss == pytest.approx({2: two_loss[2], 3: two_loss[3]}, rel=1e-6)
    assert resumed_bpb == pytest.approx(two_bpb, rel=1e-6)

    refused, _ = fit(tmp_path, "refused", 1, "--ckpt_path", str(checkpoint))
    assert refused.returncode == 2
    assert "error: the checkpoint was written by 2 training processes and this run has 1" in refused.stderr


# ---- gym: one worker per GPU ---------------------------------------------------------------------------------
# A task that reports its judge's CUDA_VISIBLE_DEVICES as its load error; the sleep keeps both slots busy at once.
PINNING_PROBE = "import os, time\ntime.sleep(1)\nraise RuntimeError('pinned=' + os.environ['CUDA_VISIBLE_DEVICES'])\n"


def run_pinning_probe(devices: list[str]) -> list[str]:
    pool = LocalPool(devices=devices)
    try:
        job = Job(id="probe", task="probe", task_source=PINNING_PROBE, code="",
                  config=EvalConfig(size="cpu", retries=0))
        results = pool.run([job, job])
    finally:
        pool.close()
    return sorted(r.error for r in results)


@pytest.mark.slow
def test_a_pool_pinned_to_gpus_on_a_machine_without_them_says_which_gpu_is_missing():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    errors = run_pinning_probe(["0", "1"])
    assert [e.split(":", 1)[0] for e in errors] == ["a judge process did not start"] * 2
    assert "CUDA_VISIBLE_DEVICES='0' names no usable GPU" in errors[0]
    assert "CUDA_VISIBLE_DEVICES='1' names no usable GPU" in errors[1]


@pytest.mark.gpu
def test_local_pool_pins_one_judge_per_device():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    assert run_pinning_probe(["0", "0"]) == ["RuntimeError: pinned=0 (task_0.py:3)"] * 2  # one line, not a traceback


def test_workers_are_pinned_by_machine_gpu_names_not_parent_indices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_gpus(2) == ["2", "3"] and visible_gpus(1) == ["2"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus(2) == ["0", "1"] and visible_gpus(0) == []
