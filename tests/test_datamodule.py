"""ProxyDataModule: the batch contract, raw-only validation, artifacts, and exact resume through a real Trainer."""
from __future__ import annotations

import json
import shutil

import lightning as L
import pytest
import torch

from proxycomp.data import CorpusConfig, DataStateError, MixingSchedule, ProxyDataModule
from proxycomp.data.datamodule import MANIFEST_FILE, SPM_MODEL_FILE
from proxycomp.views import ViewConfig
from proxycomp.vocab import NUM_SPECIALS, RAW_OFFSET, RAW_SIZE, Vocabulary

CODE = """def function_{i}(value, other={i}):
    # compute something for case {i}
    if value > other:
        return [value * {i} for _ in range(other)]
    return {{"key_{i}": value, "other": other}}


class Thing{i}:
    name = "thing {i}"
"""


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for i in range(40):
        (root / f"pkg{i % 8}").mkdir(exist_ok=True)
        (root / f"pkg{i % 8}" / f"mod{i}.py").write_text(CODE.format(i=i) * (1 + i % 3))
    return root


def make_dm(corpus_dir, tmp_path, views=("raw", "spm", "zstd"), schedule="paper", total_steps=8, corpus=None,
            **overrides) -> ProxyDataModule:
    args = dict(seq_len=64, batch_size=2, num_workers=0, artifacts_dir=str(tmp_path / "art"), seed=1)
    return ProxyDataModule(
        corpus or CorpusConfig("folder", str(corpus_dir), val_fraction=0.2),
        ViewConfig(tuple(views), spm_vocab_size=400), MixingSchedule(schedule, total_steps=total_steps),
        **{**args, **overrides},
    )


def test_vocabulary_is_known_before_setup(corpus_dir, tmp_path):
    dm = make_dm(corpus_dir, tmp_path)
    assert dm.vocabulary == Vocabulary((("spm", 400), ("zstd", 256)))
    assert dm.vocab_size == NUM_SPECIALS + RAW_SIZE + 400 + 256
    with pytest.raises(RuntimeError, match="setup"):
        dm.train_dataloader()


def test_train_batches_follow_the_contract_and_artifacts_are_written(corpus_dir, tmp_path):
    dm = make_dm(corpus_dir, tmp_path)
    dm.setup("fit")
    batch = dm.on_before_batch_transfer(next(iter(dm.train_dataloader())), 0)
    assert set(batch) == {"input_ids", "targets", "doc_ids", "positions"}
    for key, dtype in (("input_ids", torch.int64), ("targets", torch.int64), ("doc_ids", torch.int32)):
        assert batch[key].shape == (2, 64) and batch[key].dtype == dtype
    assert (batch["doc_ids"].diff(dim=1) >= 0).all()
    starts = torch.ones_like(batch["doc_ids"], dtype=torch.bool)
    starts[:, 1:] = batch["doc_ids"].diff(dim=1) != 0
    assert (batch["positions"][starts] == 0).all()
    assert ((batch["input_ids"] >= 0) & (batch["input_ids"] < dm.vocab_size)).all()
    assert (tmp_path / "art" / SPM_MODEL_FILE).read_bytes() == dm.spm_model
    manifest = json.loads((tmp_path / "art" / MANIFEST_FILE).read_text())
    assert manifest["corpus"]["kept"] == 40 and manifest["vocabulary"] == dm.vocabulary.to_dict()
    # what the first batches hold: a document or more per row, and whole pairs in the paired warmup
    first = manifest["first_batches"]
    assert first["rows"] == 2 and first["documents_per_batch"] >= 2 and 0 < first["paired_row_share"] <= 1


def test_stream_seed_changes_the_order_not_the_split(corpus_dir, tmp_path):
    dms = [make_dm(corpus_dir, tmp_path / str(k), views=("raw", "zstd"), stream_seed=k) for k in (None, 1, 2)]
    for dm in dms:
        dm.setup("fit")
    assert dms[0].config.order_seed == dms[1].config.order_seed == 1  # null: the data module's seed
    assert [d.name for d in dms[0].corpus.val] == [d.name for d in dms[2].corpus.val]
    first = [next(iter(dm.train_dataloader()))["input_ids"] for dm in dms]
    assert torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])


def test_val_loader_is_raw_only_and_deterministic(corpus_dir, tmp_path):
    dm = make_dm(corpus_dir, tmp_path, val_windows=5)
    dm.setup("fit")
    first, second = list(dm.val_dataloader()), list(dm.val_dataloader())
    assert sum(len(b["input_ids"]) for b in first) == 5
    for a, b in zip(first, second):
        assert all(torch.equal(a[k], b[k]) for k in a)
        ids = a["input_ids"]
        assert ((ids < NUM_SPECIALS) | ((ids >= RAW_OFFSET) & (ids < RAW_OFFSET + RAW_SIZE))).all()


class BatchRecorder(L.LightningModule):
    """A minimal trainable module that keeps every training batch it sees (a test harness, not a model)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[dict[str, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append({k: v.clone() for k, v in batch.items()})
        return self.weight * batch["input_ids"].float().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(dm, steps, root, ckpt_path=None) -> BatchRecorder:
    model = BatchRecorder()
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, default_root_dir=str(root),
        callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=str(root / "ckpt"), save_last=True)],
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model


@pytest.mark.slow
def test_resume_sees_the_same_batches_as_an_uninterrupted_run(corpus_dir, tmp_path):
    # 2 workers and an odd stop step: the resumed loader must restart the round-robin at the right worker.
    settings = dict(num_workers=2, total_steps=7)
    full = fit(make_dm(corpus_dir, tmp_path / "a", **settings), 7, tmp_path / "a")
    first = make_dm(corpus_dir, tmp_path / "b", **settings)
    fit(first, 3, tmp_path / "b")
    resumed_dm = make_dm(corpus_dir, tmp_path / "c", **settings)
    resumed = fit(resumed_dm, 7, tmp_path / "c", ckpt_path=str(tmp_path / "b" / "ckpt" / "last.ckpt"))
    assert len(full.seen) == 7 and len(resumed.seen) == 4
    for expected, got in zip(full.seen[3:], resumed.seen):
        assert expected.keys() == got.keys()
        assert all(torch.equal(expected[k], got[k]) for k in expected)
    # the tokenizer came from the checkpoint, not from training again
    assert resumed_dm.spm_model == first.spm_model
    assert not (tmp_path / "c" / "art" / SPM_MODEL_FILE).exists()


@pytest.mark.slow
def test_a_longer_resumed_run_keeps_the_mixing_schedule_it_was_trained_with(corpus_dir, tmp_path):
    """Stopped at step 2 of 10 (paired warmup until step 2), resumed with max_steps 40 (the CLI links it into
    total_steps): steps 2..7 are the batches of an uninterrupted run whose schedule is the first run's, not those
    of a run planned for 40 steps (paired warmup until step 8). Windows of 512 symbols start new documents every
    step, so the schedule's mode shows in every batch."""
    settings = dict(views=("raw", "zstd"), num_workers=1, seq_len=512)
    planned = fit(make_dm(corpus_dir, tmp_path / "a", total_steps=10, **settings), 8, tmp_path / "a")
    fit(make_dm(corpus_dir, tmp_path / "b", total_steps=10, **settings), 2, tmp_path / "b")
    longer = make_dm(corpus_dir, tmp_path / "c", total_steps=40, **settings)
    resumed = fit(longer, 8, tmp_path / "c", ckpt_path=str(tmp_path / "b" / "ckpt" / "last.ckpt"))
    assert longer.config.mixing.total_steps == 10 and longer.state_dict()["config"]["mixing"]["total_steps"] == 10
    for expected, got in zip(planned.seen[2:], resumed.seen, strict=True):
        assert all(torch.equal(expected[k], got[k]) for k in expected)
    stretched = fit(make_dm(corpus_dir, tmp_path / "d", total_steps=40, **settings), 8, tmp_path / "d")
    assert any(not torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(stretched.seen[2:], resumed.seen))


def test_a_state_written_before_a_setting_existed_resumes_at_its_default(corpus_dir, tmp_path):
    state = make_dm(corpus_dir, tmp_path).state_dict()
    for added in ("exclude", "exclude_packages", "split", "val_path", "val_split"):
        del state["config"]["corpus"][added]
    dm = make_dm(corpus_dir, tmp_path)
    dm.load_state_dict(state)
    # Such a state excluded nothing; whether that changed its documents is the train digest's to say.
    make_dm(corpus_dir, tmp_path, corpus=CorpusConfig("folder", str(corpus_dir), val_fraction=0.2,
                                                      exclude_packages=[])).load_state_dict(state)
    with pytest.raises(DataStateError, match=r"corpus.split: 'train' -> 'test'"):
        on_test = make_dm(corpus_dir, tmp_path, corpus=CorpusConfig("folder", str(corpus_dir), split="test"))
        on_test.load_state_dict(state)


def test_state_from_other_settings_is_refused(corpus_dir, tmp_path):
    state = make_dm(corpus_dir, tmp_path).state_dict()
    with pytest.raises(DataStateError, match=r"seq_len: 64 -> 128"):
        make_dm(corpus_dir, tmp_path, seq_len=128).load_state_dict(state)
    with pytest.raises(DataStateError, match="format"):
        make_dm(corpus_dir, tmp_path).load_state_dict({**state, "format": 99})


def test_state_from_other_documents_under_the_same_settings_is_refused(corpus_dir, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_dir, corpus)
    dm = make_dm(corpus, tmp_path / "a")
    dm.setup("fit")
    state = dm.state_dict()
    same = make_dm(corpus, tmp_path / "b")
    same.setup("fit")
    same.load_state_dict(state)
    (corpus / dm.corpus.train[0].name).write_text(CODE.format(i="edited"))  # same settings, one train file changed
    edited = make_dm(corpus, tmp_path / "c")
    edited.setup("fit")
    with pytest.raises(DataStateError, match="made from other training documents"):
        edited.load_state_dict(state)


def test_bad_arguments_are_refused(corpus_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown view 'gzip'; known views: raw, spm, zstd, brotli"):
        make_dm(corpus_dir, tmp_path, views=["raw", "gzip"])
    with pytest.raises(ValueError, match="unknown schedule"):
        make_dm(corpus_dir, tmp_path, schedule="cosine")
    with pytest.raises(ValueError, match="seq_len"):
        make_dm(corpus_dir, tmp_path, seq_len=1)


def test_one_data_config_makes_the_module_its_hyperparameters_and_its_resume_check(corpus_dir):
    from proxycomp.data import DataConfig
    from proxycomp.errors import UserError

    config = DataConfig(corpus=CorpusConfig("folder", str(corpus_dir), val_fraction=0.2),
                        views=ViewConfig(names=("raw", "zstd")), mixing=MixingSchedule(total_steps=7),
                        seq_len=64, batch_size=2, num_workers=0, seed=3)
    assert DataConfig.from_dict(config.to_dict()) == config
    dm = ProxyDataModule.from_config(config)
    assert dm.config == config and dict(dm.hparams) == config.to_dict()
    assert config.order_seed == 3 and DataConfig(stream_seed=5).order_seed == 5
    resume = config.resume_fields()  # what a stream cursor depends on: not where artifacts go, not val_windows
    assert "artifacts_dir" not in resume and "val_windows" not in resume and "spm_model_file" not in resume["views"]
    with pytest.raises(UserError, match="seq_len >= 2"):
        DataConfig(seq_len=1)
