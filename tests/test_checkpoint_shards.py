"""A fit checkpoint split into small files (bf16 weights, no Adam moments; or exact) and joined back: `fit
--ckpt_path` resumes from it at the same step, and `load_lm` reads it."""
import sys

import lightning as L
import pytest
import torch

from proxycomp.checkpoint import STATE_FILE, join_checkpoint, load_lm, split_checkpoint
from proxycomp.cli import main
from proxycomp.lightning_cli import build_cli

RECIPE = """\
trainer:
  max_steps: 6
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
model:
  arch: {d_model: 32, n_layers: 1, n_heads: 2, tie_embeddings: true}
  optim: {warmup_steps: 2}
data:
  corpus: {source: python-sources, max_documents: 30}
  views: {names: [raw, spm], spm_vocab_size: 512}
  seq_len: 64
  batch_size: 2
  val_windows: 4
  num_workers: 0
"""
MAX_BYTES = 64 * 2**10  # small enough that the tiny model takes several files


class StopAfter(L.Callback):
    """Stops after `steps` optimizer steps and records the steps it saw."""

    def __init__(self, steps: int) -> None:
        self.steps, self.seen = steps, []

    def on_train_batch_end(self, trainer, *args) -> None:
        self.seen.append(trainer.global_step)
        trainer.should_stop = trainer.global_step >= self.steps


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    """A tiny tied-embedding run stopped after 3 of its 6 steps, and its checkpoint."""
    root = tmp_path_factory.mktemp("shards")
    (root / "tiny.yaml").write_text(RECIPE)
    cli = build_cli(["--config", str(root / "tiny.yaml"), "--trainer.default_root_dir", str(root)], run=False)
    cli.trainer.callbacks.append(StopAfter(3))  # as a device call's time limit would: same settings, fewer steps
    cli.trainer.fit(cli.model, cli.datamodule)
    cli.trainer.save_checkpoint(root / "half.ckpt")
    return root


def test_split_files_stay_under_the_limit_and_drop_the_moments(half):
    files = split_checkpoint(half / "half.ckpt", half / "carry", MAX_BYTES)
    assert len(files) > 2 and files[-1].name == STATE_FILE
    assert all(f.stat().st_size <= MAX_BYTES for f in files)
    state = torch.load(half / "carry" / STATE_FILE, weights_only=True)
    assert state["aliases"] == {"model.head.weight": "model.embed.weight"}  # the tied weight is stored once
    assert [o["state"] for o in state["checkpoint"]["optimizer_states"]] == [{}]


def test_joined_checkpoint_resumes_fit_and_loads_as_a_policy(half):
    joined = join_checkpoint(half / "carry", half / "joined.ckpt")
    original = torch.load(half / "half.ckpt", weights_only=True)["state_dict"]
    loaded = torch.load(joined, weights_only=True)
    assert list(loaded["state_dict"]) == list(original)
    for name, tensor in original.items():
        assert torch.equal(loaded["state_dict"][name], tensor.to(torch.bfloat16).to(tensor.dtype)), name
    lm = load_lm(joined)
    assert lm.model.head.weight is lm.model.embed.weight
    cli = build_cli(["--config", str(half / "tiny.yaml"), "--trainer.default_root_dir", str(half / "resumed")],
                    run=False)
    steps = StopAfter(6)
    cli.trainer.callbacks.append(steps)
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=str(joined))
    assert steps.seen == [4, 5, 6]  # resumed after step 3, not from the start


def test_the_shards_verb(half, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["proxycomp"])
    assert main(["shards", "split", "--ckpt", str(half / "half.ckpt"), "--out", str(half / "cli"),
                 "--max_mib", "0.0625"]) == 0
    assert "state.pt" in capsys.readouterr().out
    assert main(["shards", "join", "--shards", str(half / "cli"), "--out", str(half / "cli.ckpt")]) == 0
    assert (half / "cli.ckpt").is_file()
    assert main(["shards", "join", "--shards", str(half), "--out", str(half / "x.ckpt")]) == 2
    assert "holds no state.pt" in capsys.readouterr().err
    assert main(["shards", "split", "--ckpt", str(half / "half.ckpt"), "--out", str(half / "tiny"),
                 "--max_mib", "0.001"]) == 2
    assert "over the" in capsys.readouterr().err


def test_an_exact_split_keeps_dtypes_and_moments(half):
    split_checkpoint(half / "half.ckpt", half / "exact", 4 * MAX_BYTES, exact=True)  # fp32: twice bf16
    joined = torch.load(join_checkpoint(half / "exact", half / "exact.ckpt"), weights_only=True)
    original = torch.load(half / "half.ckpt", weights_only=True)
    for name, tensor in original["state_dict"].items():
        assert torch.equal(joined["state_dict"][name], tensor), name
    (want,), (got,) = original["optimizer_states"], joined["optimizer_states"]
    assert want["state"] and got["state"].keys() == want["state"].keys()
    for param, moments in want["state"].items():
        assert all(torch.equal(got["state"][param][k], v) for k, v in moments.items())


def test_shards_written_before_rl_checkpoints_still_join(half):
    """A state.pt of the earlier format names fit's weights in `order`, with no `collections` or `moments`."""
    split_checkpoint(half / "half.ckpt", half / "legacy", MAX_BYTES)
    state = torch.load(half / "legacy" / STATE_FILE, weights_only=True)
    state["order"] = state.pop("collections")["state_dict"]
    del state["moments"]
    torch.save(state, half / "legacy" / STATE_FILE)
    joined = torch.load(join_checkpoint(half / "legacy", half / "legacy.ckpt"), weights_only=True)
    assert list(joined["state_dict"]) == list(torch.load(half / "half.ckpt", weights_only=True)["state_dict"])
