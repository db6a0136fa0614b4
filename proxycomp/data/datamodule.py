"""`ProxyDataModule`: corpus -> views -> packed windows, as a LightningDataModule.

Train batches mix views by the schedule (compression runs in DataLoader workers); validation batches are
raw views of held-out documents (the compressed view under the `tokens` schedule, whose model never sees raw
bytes). A `replay_file` replaces the mixed stream by a fixed one; `drop_views` removes views from the mixed stream's
windows after the schedule drew them (the raw-subset control of the comparison: its partner's windows without the
compressed segments).
The DataModule's state (batches consumed, each worker's stream cursor, the SentencePiece model bytes) travels
in the Lightning checkpoint, so a resumed run sees exactly the batches an uninterrupted one would and needs
nothing outside the checkpoint.

Continuing a run for more (or fewer) steps: a resume with another trainer.max_steps keeps the mixing schedule the
checkpoint was trained with (its total_steps, hence where the paired warmup ends), since the schedule of the
steps already trained cannot change and a document cut by the checkpoint is drawn again at the step it started
in. So the continued run sees the batches of an uninterrupted run of the new length whose data.mixing.total_steps
is the first run's; only the learning-rate cosine follows the new length.

Under DDP each rank trains on its rows of the batches one process with world_size x batch_size would see
(see packing.py), so every rank holds the same cursors and rank 0's checkpoint serves all; a resume on another
number of processes is refused. Validation windows are split between ranks without repeats (the model syncs
the sums), and rank 0's SentencePiece model is broadcast so every rank encodes with the same one.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from proxycomp.config_diff import changed_fields
from proxycomp.data.corpus import Corpus, CorpusConfig, CorpusError, load_corpus
from proxycomp.data.mixing import MixingSchedule, ScheduleError
from proxycomp.data.packing import (
    CURSOR_KEY,
    ReplayStream,
    StreamCursor,
    TrainStream,
    ValWindows,
    epochs_passed,
)
from proxycomp.errors import UserError
from proxycomp.files import write_atomic
from proxycomp.stopping import ignore_interrupts
from proxycomp.views import RawView, View, ViewConfig, train_spm
from proxycomp.vocab import Vocabulary

STATE_FORMAT = 3  # 3: one stream per batch row
# What a field added since a checkpoint was written counts as: its default (JSON values, as the state holds them).
_DEFAULT_RESUME_CONFIG = json.loads(json.dumps(
    {"corpus": asdict(CorpusConfig()), "views": asdict(ViewConfig()), "mixing": asdict(MixingSchedule()),
     "drop_views": []}))
# The held-out documents (the corpus, split by the seed) and the views they are scored in; batch size, workers
# and the schedule change how a checkpoint is trained on, not what its validation measures.
SCORED_FIELDS = ("corpus", "views", "seed")
SPM_MODEL_FILE = "spm.model"
MANIFEST_FILE = "data_manifest.json"
REPORT_BATCHES = 8  # batches the manifest's stream figures are measured on


class DataStateError(UserError):
    """A checkpoint's data state does not fit this configuration."""


@dataclass(frozen=True)
class DataConfig:
    """Everything a `ProxyDataModule` is made of, in one place: the flags `--data.*` (the module's signature spells
    them for the CLI, and builds this at once), its saved hyperparameters, its checkpoint's resume check and the
    comparison's fit configs all read it. Field meanings: `ProxyDataModule.__init__`."""

    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    views: ViewConfig = field(default_factory=ViewConfig)
    mixing: MixingSchedule = field(default_factory=MixingSchedule)
    seq_len: int = 2048
    batch_size: int = 8
    num_workers: int = 2
    val_windows: int | None = None
    artifacts_dir: str | None = None
    replay_file: str | None = None
    seed: int = 0
    stream_seed: int | None = None
    drop_views: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "drop_views", tuple(self.drop_views))
        unknown = [name for name in self.drop_views if name == "raw" or name not in self.views.names]
        if unknown:
            raise DataStateError(f"data.drop_views {list(self.drop_views)}: names only compressed views among "
                                 f"data.views.names {list(self.views.names)}; {unknown} is not one")
        if self.seq_len < 2 or self.batch_size < 1 or self.num_workers < 0:
            raise DataStateError(
                f"need data.seq_len >= 2, data.batch_size >= 1, data.num_workers >= 0; got {self.seq_len}, "
                f"{self.batch_size}, {self.num_workers}"
            )
        if self.mixing.kind == "tokens" and len(self.views.names) != 2:
            raise ScheduleError(
                "data.mixing.kind 'tokens' trains on one compressed view; set data.views.names to [raw, <view>], "
                f"got {list(self.views.names)}"
            )

    @property
    def order_seed(self) -> int:
        """The seed of document order and view draws: `stream_seed`, or `seed` when it is null."""
        return self.seed if self.stream_seed is None else self.stream_seed

    def to_dict(self) -> dict[str, Any]:
        """JSON values (tuples as lists): what a checkpoint's hyperparameters and a fit config's `data:` hold."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataConfig:
        """The config a `to_dict` (or a checkpoint's data hyperparameters) describes."""
        nested = {"corpus": CorpusConfig, "views": ViewConfig, "mixing": MixingSchedule}
        return cls(**{k: nested[k](**v) if k in nested else v for k, v in data.items()})

    def resume_fields(self) -> dict[str, Any]:
        """The settings a stream cursor is only valid under (the SentencePiece model itself is in the state)."""
        config = {k: v for k, v in self.to_dict().items() if k not in ("val_windows", "artifacts_dir")}
        config["views"].pop("spm_model_file")
        return config


class ProxyDataModule(L.LightningDataModule):
    def __init__(
        self,
        corpus: CorpusConfig = CorpusConfig(),
        views: ViewConfig = ViewConfig(),
        mixing: MixingSchedule = MixingSchedule(),
        seq_len: int = 2048,
        batch_size: int = 8,
        num_workers: int = 2,
        val_windows: int | None = None,
        artifacts_dir: str | None = None,
        replay_file: str | None = None,
        seed: int = 0,
        stream_seed: int | None = None,
        drop_views: tuple[str, ...] = (),
    ) -> None:
        """Corpus, views and mixing schedule, packed into windows of `seq_len` symbols.

        Args:
            corpus: the documents (source, filters, validation split)
            views: the views trained on and their codecs
            mixing: which views each document gets, step by step (total_steps is linked from trainer.max_steps)
            seq_len: symbols per training window (linked into the model's max_seq_len)
            batch_size: windows per optimizer step (per process under DDP)
            num_workers: DataLoader worker processes that compress and pack
            val_windows: validation windows at most; null: the whole held-out split
            artifacts_dir: where the SentencePiece model and data manifest go; null: the run's log folder
            replay_file: a .npy of int32 symbols (serialized documents end to end) to train on in order, one pass
                per epoch, instead of the mixed stream
            seed: corpus split, SentencePiece sample, document order and view draws
            stream_seed: document order and view draws instead of seed, which then keeps the split and the
                SentencePiece sample (a comparison's training seeds share one split); null: seed
            drop_views: compressed views drawn, encoded and packed as usual, then removed from every window (their
                segments and sentinels; the rest of the window moves up, padding fills the end): the stream of the run
                without them minus those views, step for step
        """
        super().__init__()
        self.config = DataConfig(corpus, views, mixing, seq_len, batch_size, num_workers, val_windows, artifacts_dir,
                                 replay_file, seed, stream_seed, drop_views)
        self.save_hyperparameters(self.config.to_dict())  # plain values: the checkpoint loads with weights_only
        self.vocabulary: Vocabulary = self.config.views.vocabulary()
        self.vocab_size: int = self.vocabulary.size
        self.corpus: Corpus | None = None
        self._spm_model: bytes | None = None
        self._batches_consumed = 0
        self._cursors: dict[int, StreamCursor] = {}

    @classmethod
    def from_config(cls, config: DataConfig) -> ProxyDataModule:
        return cls(**{f.name: getattr(config, f.name) for f in fields(config)})

    # ---- data -------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_corpus(self.config.corpus, seed=self.config.seed)
            rank_zero_info(self.corpus.report.summary())
        self._write_artifacts()

    def use_spm_model(self, model: bytes) -> None:
        """Encode the spm view with `model` (the tokenizer of the checkpoint a run starts from) instead of training
        one; `views.spm_model_file`, when set, still wins."""
        if not self.config.views.spm_model_file:
            self._spm_model = model

    @property
    def spm_model(self) -> bytes | None:
        """The serialized SentencePiece model: read from `views.spm_model_file`, else trained on first use (a
        resumed run gets it from the checkpoint)."""
        views = self.config.views
        if "spm" in views.names and self._spm_model is None:
            if views.spm_model_file:
                path = Path(views.spm_model_file)
                if not path.is_file():
                    raise CorpusError(f"data.views.spm_model_file {path} does not exist; point it at a SentencePiece "
                                      ".model file")
                self._spm_model = path.read_bytes()
            else:
                # Under DDP every rank gets here together (from its dataloaders); rank 0 trains, the rest wait.
                rank, world = self._rank_and_world()
                model = None if rank else train_spm(
                    [d.data for d in self._require_corpus().train], views.spm_vocab_size, views.spm_train_bytes,
                    self.config.seed,
                )
                self._spm_model = self.trainer.strategy.broadcast(model, src=0) if world > 1 else model
            self._write_artifacts()
        return self._spm_model

    @cached_property
    def replay_symbols(self) -> np.ndarray | None:
        """The fixed stream of `replay_file` (memory-mapped), checked against the vocabulary."""
        if not self.config.replay_file:
            return None
        path = Path(self.config.replay_file)
        try:
            symbols = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise CorpusError(f"data.replay_file {path} cannot be read as a .npy array ({err}); "
                              "write it with numpy.save") from None
        if symbols.ndim != 1 or symbols.dtype.kind not in "iu" or len(symbols) < 2:
            raise CorpusError(f"data.replay_file {path} must hold a 1-D integer array of symbols, "
                              f"got {symbols.dtype} {symbols.shape}")
        if int(symbols.min()) < 0 or int(symbols.max()) >= self.vocab_size:
            raise CorpusError(f"data.replay_file {path} holds ids outside 0..{self.vocab_size - 1}; "
                              "it was made for other views")
        return symbols

    def train_dataloader(self) -> DataLoader:
        workers = self.config.num_workers
        rank, world = self._rank_and_world()
        if self.replay_symbols is not None:
            replay = ReplayStream(
                self.replay_symbols, self.config.seq_len, self.config.batch_size, self._batches_consumed,
                dict(self._cursors), rank=rank, world_size=world,
            )
            return DataLoader(replay, batch_size=None, num_workers=workers, pin_memory=torch.cuda.is_available())
        stream = self._train_stream(self.spm_model, self.config.batch_size, self._batches_consumed, dict(self._cursors),
                                    rank=rank, world_size=world)
        return DataLoader(
            stream, batch_size=None, num_workers=workers, persistent_workers=False,
            prefetch_factor=4 if workers else None, pin_memory=torch.cuda.is_available(),
            worker_init_fn=ignore_interrupts,
        )

    @property
    def scored_view(self) -> View:
        """The view the model is scored in: raw bytes, except under the `tokens` schedule, whose model never sees
        them and is scored in its one compressed view."""
        if self.config.mixing.kind != "tokens":
            return RawView(self.vocabulary.offset("raw"))
        name = next(n for n in self.config.views.names if n != "raw")
        return self.config.views.build(self.spm_model)[name]

    def val_dataloader(self) -> DataLoader:
        documents = [d.data for d in self._require_corpus().val]
        windows = ValWindows(documents, self.config.seq_len, self.config.val_windows, self.scored_view)
        rank, world = self._rank_and_world()
        if world == 1:
            return DataLoader(windows, batch_size=self.config.batch_size, shuffle=False, num_workers=0)
        if len(windows) < world:
            raise CorpusError(
                f"validation has {len(windows)} windows, fewer than the {world} processes; "
                "raise data.val_windows or data.val_fraction"
            )
        # Each window once (no padding repeats, which would bias val/bpb); ranks may differ by one window.
        sampler = UnrepeatedDistributedSampler(windows, num_replicas=world, rank=rank, shuffle=False)
        return DataLoader(windows, batch_size=self.config.batch_size, sampler=sampler, num_workers=0)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # Runs in the main process just before a batch is used (not when it is prefetched), so the saved cursor
        # is the one of the last batch the model actually trained on.
        if isinstance(batch, dict) and CURSOR_KEY in batch:
            logical, *cursor = batch.pop(CURSOR_KEY).tolist()
            self._cursors[logical] = StreamCursor.from_list(cursor)
            self._batches_consumed += 1
        return batch

    # ---- checkpoint state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "batches_consumed": self._batches_consumed,
            "cursors": {logical: c.to_list() for logical, c in self._cursors.items()},
            "spm_model": self._spm_model,
            "config": self.config.resume_fields(),
            "world_size": self._rank_and_world()[1],
            "train_digest": self.corpus.report.train_digest if self.corpus is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("format") != STATE_FORMAT:
            raise DataStateError(f"data state has format {state_dict.get('format')!r}, this code reads {STATE_FORMAT}")
        self._spm_model = state_dict["spm_model"]
        if self.trainer is not None and self.trainer.state.fn != "fit":
            return  # validating reads held-out windows, not the training stream the settings below belong to
        # First: a run moved to other devices often rescales batch_size too, which the next check would name.
        saved_world, world = state_dict.get("world_size", 1), self._rank_and_world()[1]
        if saved_world != world:
            raise DataStateError(
                f"the checkpoint was written by {saved_world} training processes and this run has {world}; the "
                "ranks' rows of the data stream depend on the number of processes, so resume with the same "
                "trainer.devices x trainer.num_nodes"
            )
        saved = state_dict["config"]
        saved_steps = saved["mixing"]["total_steps"]
        if saved_steps != self.config.mixing.total_steps:  # trained further or shorter: the schedule stays as trained
            rank_zero_info(f"data: trainer.max_steps changed on resume; the mixing schedule stays as trained "
                           f"(data.mixing.total_steps {saved_steps}, not {self.config.mixing.total_steps})")
            self.config = replace(self.config, mixing=replace(self.config.mixing, total_steps=saved_steps))
            self.hparams.mixing["total_steps"] = saved_steps
            if self.corpus is not None:
                self._write_artifacts()  # the manifest names the schedule trained on
        changed = changed_fields(saved, self.config.resume_fields(), defaults=self._resume_defaults())
        if changed:
            raise DataStateError(
                f"the checkpoint's data stream was made with other settings ({'; '.join(changed)}); "
                "resume with the same data settings"
            )
        # Same settings, other documents (python-sources of another interpreter, edited files): the cursors would
        # point into another stream. States written before the digest existed carry none.
        saved_digest = state_dict.get("train_digest")
        if saved_digest and self.corpus is not None and saved_digest != self.corpus.report.train_digest:
            raise DataStateError(
                f"the checkpoint's data stream was made from other training documents than these "
                f"({self.corpus.report.summary()}); the same settings read other files here. Resume on the same "
                "data, or start a new run from the weights with --init_from"
                + ("" if "exclude_packages" in saved["corpus"] else " (a checkpoint written before "
                   "data.corpus.exclude_packages read those packages too: --data.corpus.exclude_packages [] reads "
                   "them again)")
            )
        self._batches_consumed = int(state_dict["batches_consumed"])
        self._cursors = {int(k): StreamCursor.from_list(v) for k, v in state_dict["cursors"].items()}

    def epochs_passed(self) -> float | None:
        """Passes over the train documents the mixed stream has made so far (whatever views they were drawn in); None
        for a replay stream."""
        if self.config.replay_file:
            return None
        workers = max(1, self.config.num_workers)
        rows = self.config.batch_size * self._rank_and_world()[1]
        return epochs_passed(len(self._require_corpus().train), workers, rows, self._cursors)

    def scored_changes(self, saved: dict[str, Any]) -> list[str]:
        """"field: saved -> now" for the settings that decide what validation scores (which documents are held out,
        and in which view) that differ between a checkpoint's data state (`config`) and this module."""
        def scored(config: dict[str, Any]) -> dict[str, Any]:
            return {k: config[k] for k in SCORED_FIELDS if k in config}

        now = self.config.resume_fields()
        return changed_fields(scored(saved), scored(now), defaults=scored(self._resume_defaults()))

    # ---- helpers --------------------------------------------------------------------------------------------
    def _resume_defaults(self) -> dict[str, Any]:
        """What a field missing from a saved data state counts as: its default, except corpus.exclude_packages,
        which counts as this run's. States written before it existed excluded nothing, yet most read no file of the
        packages it names; whether they did is the train digest's to say, not the setting's."""
        defaults = json.loads(json.dumps(_DEFAULT_RESUME_CONFIG))
        defaults["corpus"]["exclude_packages"] = list(self.config.corpus.exclude_packages)
        return defaults

    def _rank_and_world(self) -> tuple[int, int]:
        """This process's rank and the number of training processes (0, 1 outside a Trainer)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _train_stream(self, spm_model: bytes | None, batch_size: int, batches_consumed: int = 0,
                      cursors: dict[int, StreamCursor] | None = None, rank: int = 0,
                      world_size: int = 1) -> TrainStream:
        c = self.config
        return TrainStream([d.data for d in self._require_corpus().train], c.views, spm_model, c.mixing, c.seq_len,
                           batch_size, c.order_seed, batches_consumed, cursors, rank, world_size, c.drop_views)

    def _require_corpus(self) -> Corpus:
        if self.corpus is None:
            raise RuntimeError("ProxyDataModule.setup() has not run; call setup('fit') or pass it to a Trainer")
        return self.corpus

    def artifacts_path(self) -> Path:
        if self.config.artifacts_dir:
            return Path(self.config.artifacts_dir)
        trainer = self.trainer
        if trainer is not None and trainer.log_dir:
            return Path(trainer.log_dir)
        return Path("runs") / "data"

    def _write_artifacts(self) -> None:
        """The SentencePiece model and a manifest (corpus report, views, schedule, and what the first batches hold)
        beside the run, when training."""
        if self.trainer is not None and self.trainer.state.fn != "fit":
            return  # validating writes nothing: the artifacts belong to the run that trains
        root = self.artifacts_path()  # on every rank: under DDP trainer.log_dir is a broadcast
        if self.trainer is not None and not self.trainer.is_global_zero:
            return
        root.mkdir(parents=True, exist_ok=True)
        manifest = {
            "config": self.config.resume_fields(),
            "vocabulary": self.vocabulary.to_dict(),
            "corpus": self._require_corpus().report.to_dict(),
        }
        if self._spm_model is not None:
            write_atomic(root / SPM_MODEL_FILE, self._spm_model)
            manifest["spm_model_file"] = SPM_MODEL_FILE
        if not self.config.replay_file and (self._spm_model is not None or "spm" not in self.config.views.names):
            # Distinct documents per batch and the paired share of rows (in the translation warmup), measured on the
            # global batch of a one-worker stream: the same figures in distribution as the run's workers give.
            stream = self._train_stream(self._spm_model, self.config.batch_size * self._rank_and_world()[1])
            manifest["first_batches"] = stream.report(REPORT_BATCHES)
        write_atomic(root / MANIFEST_FILE, json.dumps(manifest, indent=2))

