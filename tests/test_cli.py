"""The `proxycomp` command end to end: a tiny fit, generate and eval-bpb, and every bad-input path."""
import sys
import types
from pathlib import Path

import lightning as L
import pytest

from proxycomp.cli import build_cli, main

TINY_RECIPE = """\
trainer:
  max_steps: 6
  val_check_interval: 3
  log_every_n_steps: 2
  enable_progress_bar: false
  enable_model_summary: false
model:
  arch: {d_model: 32, n_layers: 1, n_heads: 2}
  optim: {warmup_steps: 2}
data:
  corpus: {source: python-sources, max_documents: 30}
  views: {names: [raw, spm], spm_vocab_size: 512}
  seq_len: 64
  batch_size: 2
  val_windows: 4
  num_workers: 0
"""


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, command: str, *fragments: str) -> None:
    assert rc == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"proxycomp {command}: error: ")
    for fragment in fragments:
        assert fragment in last


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny fit through the CLI; yields its run folder."""
    root = tmp_path_factory.mktemp("fit")
    (root / "tiny.yaml").write_text(TINY_RECIPE)
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    mp.setattr(sys, "argv", ["proxycomp"])
    try:
        assert main(["fit", "--config", "tiny.yaml"]) == 0
    finally:
        mp.undo()
    return root / "runs" / "proxycomp" / "version_0"


@pytest.mark.slow
def test_fit_writes_checkpoints_metrics_and_config(trained):
    assert (trained / "checkpoints" / "last.ckpt").is_file()
    assert not list((trained / "checkpoints").glob(".*tmp*"))
    header, *rows = (trained / "metrics.csv").read_text().splitlines()
    for column in ("train/loss", "train/loss_raw", "val/bpb", "perf/symbols_per_s", "lr-AdamW/pg1"):
        assert column in header.split(",")
    assert (trained / "config.yaml").is_file() and (trained.parents[1] / "tb" / "proxycomp").is_dir()


@pytest.mark.slow
def test_generate_continues_the_prompt(trained, capsys):
    rc, out, _ = run(["generate", "--ckpt", str(trained / "checkpoints" / "last.ckpt"), "--prompt", "def fib(",
                      "--max_bytes", "16", "--seed", "1"], capsys)
    assert rc == 0 and out.startswith("def fib(")


@pytest.mark.slow
def test_eval_bpb_counts_every_byte(trained, tmp_path, capsys):
    (tmp_path / "a.py").write_bytes(b"x = 1\n" * 30)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_bytes(b"def f():\n    pass\n")
    rc, out, _ = run(["eval-bpb", "--ckpt", str(trained / "checkpoints" / "last.ckpt"), "--data", str(tmp_path),
                      "--seq_len", "32", "--stride", "16"], capsys)
    assert rc == 0
    assert f"over {6 * 30 + 18} bytes in 2 documents (seq_len 32, stride 16)" in out
    assert 0 < float(out.split("bits per byte: ")[1].split()[0]) < 16


def test_unknown_command(capsys):
    rc, _, err = run(["train"], capsys)
    assert rc == 2 and "unknown command 'train'" in err


def test_no_command_prints_usage_and_fails(capsys):
    rc, _, err = run([], capsys)
    assert rc == 2 and "proxycomp eval-bpb --ckpt" in err


def test_gym_is_dispatched_with_the_remaining_arguments(monkeypatch):
    seen = []
    gym_cli = types.ModuleType("proxycomp.gym_bridge.cli")
    gym_cli.main = lambda argv: seen.append(argv) or 7
    monkeypatch.setitem(sys.modules, "proxycomp.gym_bridge.cli", gym_cli)
    assert main(["gym", "tasks", "--json"]) == 7 and seen == [["tasks", "--json"]]


def test_generate_missing_checkpoint(tmp_path, capsys):
    rc, _, err = run(["generate", "--ckpt", str(tmp_path / "none.ckpt"), "--prompt", "x"], capsys)
    assert_one_line_error(rc, err, "generate", "none.ckpt does not exist")


def test_eval_bpb_corrupt_checkpoint(tmp_path, capsys):
    (tmp_path / "bad.ckpt").write_bytes(b"\x00garbage")
    (tmp_path / "a.py").write_bytes(b"pass\n")
    rc, _, err = run(["eval-bpb", "--ckpt", str(tmp_path / "bad.ckpt"), "--data", str(tmp_path / "a.py")], capsys)
    assert_one_line_error(rc, err, "eval-bpb", "bad.ckpt cannot be loaded")


def test_eval_bpb_missing_data(tmp_path, capsys):
    rc, _, err = run(["eval-bpb", "--ckpt", str(tmp_path / "x.ckpt"), "--data", str(tmp_path / "nowhere")], capsys)
    assert_one_line_error(rc, err, "eval-bpb", "nowhere is no file, folder or matching glob")


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["proxycomp"])
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_RECIPE)
    return path


@pytest.mark.parametrize(
    "override, fragments",
    [
        (["--data.views.names", "[raw, gzip]"], ["unknown view 'gzip'"]),
        (["--model.arch.attn_backend", "xformers"], ["unknown model.arch.attn_backend 'xformers'", "sdpa, triton, flash_attn, flex"]),
        (["--model.arch.n_heads", "3"], ["model.arch.d_model (32) must be divisible by model.arch.n_heads (3)"]),
        (["--model.compile_mode", "reduce_overhead"], ["model.compile_mode='reduce_overhead'", "reduce-overhead"]),
        (["--data.seq_len", "1"], ["seq_len >= 2"]),
    ],
)
def test_fit_bad_values(recipe, capsys, override, fragments):
    rc, _, err = run(["fit", "--config", str(recipe), *override], capsys)
    assert_one_line_error(rc, err, "fit", *fragments)


def test_fit_config_typo(recipe, capsys):
    recipe.write_text(TINY_RECIPE.replace("d_model:", "d_modle:"))
    rc, _, err = run(["fit", "--config", str(recipe)], capsys)
    assert_one_line_error(rc, err, "fit", "d_modle")


def test_fit_missing_config(recipe, capsys):
    rc, _, err = run(["fit", "--config", str(recipe.with_name("nope.yaml"))], capsys)
    assert_one_line_error(rc, err, "fit", "nope.yaml")


class _LossRecorder(L.Callback):
    def __init__(self, stop_after: int | None = None) -> None:
        self.losses: list[float] = []
        self.stop_after = stop_after

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))
        if self.stop_after is not None:
            trainer.should_stop = trainer.global_step >= self.stop_after


@pytest.mark.slow
def test_resumed_cli_run_continues_the_same_loss_curve(recipe):
    """Real data module and CLI wiring: 6 steps straight == 3 steps, checkpoint, resume for 3 more."""
    overrides = ["--config", str(recipe), "--trainer.logger", "false"]

    def fit(recorder: _LossRecorder, ckpt_path: str | None = None):
        cli = build_cli([*overrides, "--trainer.default_root_dir", f"run{len(runs)}"], run=False)
        runs.append(cli)
        cli.trainer.callbacks.append(recorder)
        cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt_path)
        return cli.trainer

    runs = []
    straight, first, second = _LossRecorder(), _LossRecorder(stop_after=3), _LossRecorder()
    fit(straight)
    fit(first).save_checkpoint("half.ckpt")
    fit(second, "half.ckpt")
    assert len(straight.losses) == 6
    assert first.losses + second.losses == pytest.approx(straight.losses, abs=1e-5)


def test_rl_config_typo_is_one_line_error(capsys, tmp_path):
    bad = tmp_path / "rl.yaml"
    bad.write_text("stepz: 3\n")
    assert main(["rl", "--config", str(bad), "--ckpt", str(tmp_path / "none.ckpt")]) != 0
    err = capsys.readouterr().err.strip()
    assert "stepz" in err and "Traceback" not in err
