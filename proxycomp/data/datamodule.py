"""`ProxyDataModule`: corpus -> views -> packed windows, as a LightningDataModule.

Train batches mix views by the schedule (compression runs in DataLoader workers); validation batches are
raw views of held-out documents (the compressed view under the `tokens` schedule, whose model never sees raw
bytes). A `replay_file` replaces the mixed stream by a fixed one (the raw-subset control of the comparison).
The DataModule's state (batches consumed, each worker's stream cursor, the SentencePiece model bytes) travels
in the Lightning checkpoint, so a resumed run sees exactly the batches an uninterrupted one would and needs
nothing outside the checkpoint.

Under DDP each rank trains on its rows of the batches one process with world_size x batch_size would see
(see packing.py), so every rank holds the same cursors and rank 0's checkpoint serves all; a resume on another
number of processes is refused. Validation windows are split between ranks without repeats (the model syncs
the sums), and rank 0's SentencePiece model is broadcast so every rank encodes with the same one.
"""
from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from proxycomp.data.corpus import Corpus, CorpusError, load_corpus
from proxycomp.data.mixing import MixingSchedule, ScheduleError
from proxycomp.data.packing import CURSOR_KEY, ReplayStream, StreamCursor, TrainStream, ValWindows
from proxycomp.views import ViewConfig, train_spm
from proxycomp.vocab import Vocabulary

STATE_FORMAT = 1
SPM_MODEL_FILE = "spm.model"
MANIFEST_FILE = "data_manifest.json"


class DataStateError(ValueError):
    """A checkpoint's data state does not fit this configuration."""


class ProxyDataModule(L.LightningDataModule):
    def __init__(
        self,
        source: str = "python-sources",
        path: str | None = None,
        glob: str = "**/*.py",
        text_field: str = "text",
        views: list[str] = ["raw", "spm"],  # noqa: B006 - LightningCLI reads the default from the signature
        spm_vocab_size: int = 8192,
        spm_train_bytes: int = 20_000_000,
        zstd_level: int = 3,
        brotli_quality: int = 5,
        seq_len: int = 2048,
        batch_size: int = 8,
        schedule: str = "paper",
        r_peak: float = 0.9,
        r_start: float = 0.4,
        warmup_frac: float = 0.2,
        total_steps: int = 1000,
        val_fraction: float = 0.05,
        min_bytes: int = 200,
        max_bytes: int = 200_000,
        max_documents: int | None = None,
        val_windows: int | None = None,
        num_workers: int = 2,
        artifacts_dir: str | None = None,
        spm_model_file: str | None = None,
        replay_file: str | None = None,
        seed: int = 0,
    ) -> None:
        """See the module docstring. `spm_train_bytes` caps the text SentencePiece trains on (a seeded sample
        of the train split); `total_steps` is linked to trainer.max_steps by the CLI. `spm_model_file` is a
        SentencePiece model to use instead of training one (runs that must share a tokenizer).
        `replay_file` is a .npy of int32 symbols (serialized documents end to end) to train on in order,
        one pass per epoch, instead of the mixed stream."""
        super().__init__()
        if seq_len < 2 or batch_size < 1 or num_workers < 0:
            raise ValueError(
                f"need seq_len >= 2, batch_size >= 1, num_workers >= 0; got {seq_len}, {batch_size}, {num_workers}"
            )
        self.save_hyperparameters()
        self.view_config = ViewConfig(tuple(views), spm_vocab_size, zstd_level, brotli_quality)
        self.schedule = MixingSchedule(schedule, r_start, r_peak, warmup_frac, total_steps)
        if schedule == "tokens" and len(views) != 2:
            raise ScheduleError(
                f"data.schedule 'tokens' trains on one compressed view; set data.views to [raw, <view>], got {list(views)}"
            )
        self.vocabulary: Vocabulary = self.view_config.vocabulary()
        self.vocab_size: int = self.vocabulary.size
        self.corpus: Corpus | None = None
        self._spm_model: bytes | None = None
        self._batches_consumed = 0
        self._cursors: dict[int, StreamCursor] = {}

    # ---- data -------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.corpus is not None:
            return
        h = self.hparams
        self.corpus = load_corpus(
            h.source, h.path, h.glob, h.text_field, h.min_bytes, h.max_bytes, h.val_fraction, h.max_documents,
            seed=h.seed,
        )
        rank_zero_info(self.corpus.report.summary())
        self._write_artifacts()

    @property
    def spm_model(self) -> bytes | None:
        """The serialized SentencePiece model: read from `spm_model_file`, else trained on first use (a resumed
        run gets it from the checkpoint)."""
        if "spm" in self.view_config.names and self._spm_model is None:
            if self.hparams.spm_model_file:
                path = Path(self.hparams.spm_model_file)
                if not path.is_file():
                    raise CorpusError(f"data.spm_model_file {path} does not exist; point it at a SentencePiece .model file")
                self._spm_model = path.read_bytes()
            else:
                # Under DDP every rank gets here together (from its dataloaders); rank 0 trains, the rest wait.
                rank, world = self._rank_and_world()
                model = None if rank else train_spm(
                    [d.data for d in self._require_corpus().train],
                    self.hparams.spm_vocab_size,
                    self.hparams.spm_train_bytes,
                    self.hparams.seed,
                )
                self._spm_model = self.trainer.strategy.broadcast(model, src=0) if world > 1 else model
            self._write_artifacts()
        return self._spm_model

    @cached_property
    def replay_symbols(self) -> np.ndarray | None:
        """The fixed stream of `replay_file` (memory-mapped), checked against the vocabulary."""
        if not self.hparams.replay_file:
            return None
        path = Path(self.hparams.replay_file)
        try:
            symbols = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise CorpusError(f"data.replay_file {path} cannot be read as a .npy array ({err}); write it with numpy.save") from None
        if symbols.ndim != 1 or symbols.dtype.kind not in "iu" or len(symbols) < 2:
            raise CorpusError(f"data.replay_file {path} must hold a 1-D integer array of symbols, got {symbols.dtype} {symbols.shape}")
        if int(symbols.min()) < 0 or int(symbols.max()) >= self.vocab_size:
            raise CorpusError(f"data.replay_file {path} holds ids outside 0..{self.vocab_size - 1}; it was made for other views")
        return symbols

    def train_dataloader(self) -> DataLoader:
        workers = self.hparams.num_workers
        rank, world = self._rank_and_world()
        if self.replay_symbols is not None:
            replay = ReplayStream(
                self.replay_symbols, self.hparams.seq_len, self.hparams.batch_size, self._batches_consumed,
                dict(self._cursors), rank=rank, world_size=world,
            )
            return DataLoader(replay, batch_size=None, num_workers=workers, pin_memory=torch.cuda.is_available())
        stream = TrainStream(
            [d.data for d in self._require_corpus().train],
            self.view_config,
            self.spm_model,
            self.schedule,
            self.hparams.seq_len,
            self.hparams.batch_size,
            self.hparams.seed,
            self._batches_consumed,
            dict(self._cursors),
            rank=rank,
            world_size=world,
        )
        return DataLoader(
            stream, batch_size=None, num_workers=workers, persistent_workers=False,
            prefetch_factor=4 if workers else None, pin_memory=torch.cuda.is_available(),
        )

    def val_dataloader(self) -> DataLoader:
        view = None
        if self.schedule.kind == "tokens":
            compressed = next(name for name in self.view_config.names if name != "raw")
            view = self.view_config.build(self.spm_model)[compressed]
        documents = [d.data for d in self._require_corpus().val]
        windows = ValWindows(documents, self.hparams.seq_len, self.hparams.val_windows, view)
        rank, world = self._rank_and_world()
        if world == 1:
            return DataLoader(windows, batch_size=self.hparams.batch_size, shuffle=False, num_workers=0)
        if len(windows) < world:
            raise CorpusError(
                f"validation has {len(windows)} windows, fewer than the {world} processes; "
                "raise data.val_windows or data.val_fraction"
            )
        # Each window once (no padding repeats, which would bias val/bpb); ranks may differ by one window.
        sampler = UnrepeatedDistributedSampler(windows, num_replicas=world, rank=rank, shuffle=False)
        return DataLoader(windows, batch_size=self.hparams.batch_size, sampler=sampler, num_workers=0)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # Runs in the main process just before a batch is used (not when it is prefetched), so the saved cursor
        # is the one of the last batch the model actually trained on.
        if isinstance(batch, dict) and CURSOR_KEY in batch:
            logical, windows, document, start = batch.pop(CURSOR_KEY).tolist()
            self._cursors[logical] = StreamCursor(windows, document, start)
            self._batches_consumed += 1
        return batch

    # ---- checkpoint state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "batches_consumed": self._batches_consumed,
            "cursors": {logical: c.to_list() for logical, c in self._cursors.items()},
            "spm_model": self._spm_model,
            "config": self._resume_config(),
            "world_size": self._rank_and_world()[1],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("format") != STATE_FORMAT:
            raise DataStateError(f"data state has format {state_dict.get('format')!r}, this code reads {STATE_FORMAT}")
        # First: a run moved to other devices often rescales batch_size too, which the next check would name.
        saved_world, world = state_dict.get("world_size", 1), self._rank_and_world()[1]
        if saved_world != world:
            raise DataStateError(
                f"the checkpoint was written by {saved_world} training processes and this run has {world}; the "
                "ranks' rows of the data stream depend on the number of processes, so resume with the same "
                "trainer.devices x trainer.num_nodes"
            )
        saved, now = state_dict["config"], self._resume_config()
        changed = [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in now.items() if saved.get(k) != v]
        if changed:
            raise DataStateError(
                f"the checkpoint's data stream was made with other settings ({'; '.join(changed)}); "
                "resume with the same data settings"
            )
        self._batches_consumed = int(state_dict["batches_consumed"])
        self._cursors = {int(k): StreamCursor(*v) for k, v in state_dict["cursors"].items()}
        self._spm_model = state_dict["spm_model"]

    def _resume_config(self) -> dict[str, Any]:
        """Settings a stream cursor is only valid under."""
        h = self.hparams
        keys = ("source", "path", "glob", "text_field", "views", "spm_vocab_size", "zstd_level", "brotli_quality",
                "seq_len", "batch_size", "schedule", "r_peak", "r_start", "warmup_frac", "total_steps",
                "val_fraction", "min_bytes", "max_bytes", "max_documents", "num_workers", "replay_file", "seed")
        return {k: list(h[k]) if k == "views" else h[k] for k in keys}

    # ---- helpers --------------------------------------------------------------------------------------------
    def _rank_and_world(self) -> tuple[int, int]:
        """This process's rank and the number of training processes (0, 1 outside a Trainer)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _require_corpus(self) -> Corpus:
        if self.corpus is None:
            raise RuntimeError("ProxyDataModule.setup() has not run; call setup('fit') or pass it to a Trainer")
        return self.corpus

    def artifacts_path(self) -> Path:
        if self.hparams.artifacts_dir:
            return Path(self.hparams.artifacts_dir)
        trainer = self.trainer
        if trainer is not None and trainer.log_dir:
            return Path(trainer.log_dir)
        return Path("runs") / "data"

    def _write_artifacts(self) -> None:
        """The SentencePiece model and a manifest (corpus report, views, schedule) beside the run."""
        root = self.artifacts_path()  # on every rank: under DDP trainer.log_dir is a broadcast
        if self.trainer is not None and not self.trainer.is_global_zero:
            return
        root.mkdir(parents=True, exist_ok=True)
        manifest = {
            "config": self._resume_config(),
            "vocabulary": self.vocabulary.to_dict(),
            "corpus": self._require_corpus().report.to_dict(),
        }
        if self._spm_model is not None:
            _atomic_write(root / SPM_MODEL_FILE, self._spm_model)
            manifest["spm_model_file"] = SPM_MODEL_FILE
        _atomic_write(root / MANIFEST_FILE, json.dumps(manifest, indent=2).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
