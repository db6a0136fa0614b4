"""The `proxycomp` command end to end: a tiny fit, generate and eval-bpb, run folders, continuing a run, and every
bad-input path (one line on stderr, exit status 2, nothing lost)."""
import errno
import importlib
import io
import logging
import re
import shutil
import signal
import sys
import types
from pathlib import Path

import lightning as L
import pytest
import torch

from proxycomp import checkpoint as checkpoint_module
from proxycomp import cli as proxycomp_cli
from proxycomp import lightning_cli
from proxycomp.cli import main
from proxycomp.lightning_cli import build_cli
from proxycomp.stopping import StopAtStepBoundary

TINY_RECIPE = """\
trainer:
  max_steps: 5
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
    """One tiny fit through the CLI (5 steps, validation every 3); yields its run folder."""
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


def step_of(checkpoint: Path) -> int:
    return torch.load(checkpoint, weights_only=True, mmap=True)["global_step"]


def val_steps(run: Path) -> list[int]:
    """The steps metrics.csv holds a val/bpb at."""
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    column = header.split(",").index("val/bpb")
    return [int(row.split(",")[header.split(",").index("step")]) for row in rows if row.split(",")[column]]


@pytest.mark.slow
def test_fit_writes_checkpoints_metrics_and_config(trained):
    assert (trained / "checkpoints" / "last.ckpt").is_file()
    assert not list((trained / "checkpoints").glob(".*tmp*"))
    header, *rows = (trained / "metrics.csv").read_text().splitlines()
    for column in ("train/loss", "train/loss_raw", "val/bpb", "perf/symbols_per_s", "lr-AdamW/pg1"):
        assert column in header.split(",")
    assert (trained / "config.yaml").is_file() and (trained.parents[1] / "tb" / "proxycomp").is_dir()


@pytest.mark.slow
def test_fit_validates_and_checkpoints_at_its_last_step(trained):
    """5 steps with validation every 3: the last step is validated too, and the best checkpoint is from it."""
    assert step_of(trained / "checkpoints" / "last.ckpt") == 5
    assert len(val_steps(trained)) == 2  # at step 3 and at the end
    assert [p.name for p in (trained / "checkpoints").glob("step*.ckpt")] == ["step000005.ckpt"]


@pytest.fixture
def run_copy(trained, tmp_path, monkeypatch) -> Path:
    """A copy of the trained run's working folder (runs/ and the recipe), as the working directory."""
    shutil.copytree(trained.parents[2], tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setattr(sys, "argv", ["proxycomp"])
    return tmp_path / "work" / "runs" / "proxycomp" / "version_0"


@pytest.fixture
def lightning_log(caplog):
    """caplog with Lightning's own records: Lightning's loggers stop propagating to the root logger when it is
    imported before any handler exists, which depends on what ran earlier in the session."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    for logger in loggers:
        caplog.set_level(logging.INFO, logger=logger.name)
        logger.addHandler(caplog.handler)
    yield caplog
    for logger in loggers:
        logger.removeHandler(caplog.handler)


@pytest.mark.slow
def test_last_continues_the_newest_run_for_more_steps_in_its_own_folder(run_copy, capsys, lightning_log, recwarn):
    caplog = lightning_log
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--trainer.max_steps", "7", "--ckpt_path", "last"], capsys)
    assert rc == 0, err
    noise = ("💡 Tip", "LeafSpec", "exists and is not empty")  # said on every run, about nothing in it
    assert not [n for n in noise if n in caplog.text + err + " ".join(str(w.message) for w in recwarn)]
    assert [p.name for p in run_copy.parent.iterdir()] == ["version_0"]  # no new version: the curve goes on
    assert step_of(run_copy / "checkpoints" / "last.ckpt") == 7
    steps = val_steps(run_copy)
    assert len(steps) == 4 and steps == sorted(set(steps))  # 3, 5 (first run), 6 and 7, in one metrics.csv
    assert "the mixing schedule stays as trained (data.mixing.total_steps 5, not 7)" in caplog.text
    manifest = (run_copy / "data_manifest.json").read_text()
    assert '"total_steps": 5' in manifest  # the schedule trained on, not the new length


@pytest.mark.slow
def test_resuming_a_finished_run_says_there_is_nothing_to_train(run_copy, capsys):
    """It was a silent no-op with status 0."""
    before = {p: p.read_bytes() for p in Path("runs").rglob("*") if p.is_file()}
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--ckpt_path", "last"], capsys)
    assert rc == 0 and err == ("fit: runs/proxycomp/version_0/checkpoints/last.ckpt is at step 5, which "
                               "trainer.max_steps (5) does not pass: nothing to train; pass a larger "
                               "--trainer.max_steps to train it further\n")
    assert {p: p.read_bytes() for p in Path("runs").rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_failed_resume_leaves_the_run_folder_as_it_was(run_copy, capsys):
    def files():
        return {p: p.read_bytes() for p in sorted(Path("runs").rglob("*")) if p.is_file()}

    before = files()
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--data.batch_size", "3", "--ckpt_path", "last",
                      "--trainer.max_steps", "6"], capsys)
    assert_one_line_error(rc, err, "fit", "data stream was made with other settings", "batch_size: 2 -> 3")
    assert files() == before  # config.yaml, hparams.yaml, metrics.csv: the failed call's own are gone


def test_last_without_a_run_is_one_line(recipe, capsys):
    rc, _, err = run(["fit", "--config", str(recipe), "--ckpt_path", "last"], capsys)
    assert_one_line_error(rc, err, "fit", "--ckpt_path last: no run under runs/proxycomp has a checkpoints/last.ckpt")
    assert not Path("runs").exists()


@pytest.mark.parametrize("name, content, fragment", [
    ("missing.ckpt", None, "missing.ckpt does not exist"),
    ("damaged.ckpt", b"\x00garbage", "damaged.ckpt cannot be loaded"),
])
def test_fit_resume_from_a_bad_checkpoint_is_one_line(recipe, capsys, name, content, fragment):
    if content is not None:
        Path(name).write_bytes(content)
    rc, _, err = run(["fit", "--config", str(recipe), "--ckpt_path", name], capsys)
    assert_one_line_error(rc, err, "fit", fragment)
    assert not Path("runs").exists()


@pytest.mark.slow
def test_validate_reports_without_writing_and_refuses_what_does_not_fit(run_copy, capsys):
    before = sorted(Path(".").rglob("*"))
    # The run's own config.yaml, as the error below suggests, reads back into validate.
    rc, out, _ = run(["validate", "--config", str(run_copy / "config.yaml"), "--ckpt_path", "last"], capsys)
    assert rc == 0 and "val/bpb" in out
    Path("byte.yaml").write_text(TINY_RECIPE.replace("names: [raw, spm], spm_vocab_size: 512", "names: [raw]"))
    rc, _, err = run(["validate", "--config", "byte.yaml", "--ckpt_path", "last"], capsys)
    assert_one_line_error(rc, err, "validate", "was trained on other data than this config reads",
                          "views.names: ['raw', 'spm'] -> ['raw']")
    assert sorted(Path(".").rglob("*")) == sorted([*before, Path("byte.yaml")])


@pytest.mark.slow
def test_last_with_a_run_config_is_that_run_and_validate_refuses_other_data(run_copy, capsys):
    """The README's `validate --config runs/<name>/version_0/config.yaml --ckpt_path last` took the newest run of that
    name, here one trained on other documents (and so with other weights), and printed its figure with status 0."""
    other = run_copy.with_name("version_1")
    shutil.copytree(run_copy, other)
    checkpoint = torch.load(other / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["ProxyDataModule"]["config"]["corpus"]["max_documents"] = 20
    checkpoint["state_dict"] = {k: v / 2 if v.is_floating_point() else v for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, other / "checkpoints" / "last.ckpt")  # the newest last.ckpt of the name
    rc, out, err = run(["validate", "--config", str(run_copy / "config.yaml"), "--ckpt_path", "last"], capsys)
    assert rc == 0, err
    header, *rows = (run_copy / "metrics.csv").read_text().splitlines()
    trained = [row.split(",")[header.split(",").index("val/bpb")] for row in rows][-1]
    assert re.search(r"val/bpb\W+([\d.]+)", out).group(1) == trained  # version_0's own checkpoint, scored again
    rc, _, err = run(["validate", "--config", "tiny.yaml", "--ckpt_path", "last"], capsys)  # a recipe: the newest
    assert_one_line_error(rc, err, "validate", "runs/proxycomp/version_1/checkpoints/last.ckpt was trained on other "
                          "data than this config reads (corpus.max_documents: 20 -> 30)", "its run's config.yaml")


def test_ckpt_path_help_is_ours(capsys):
    """Lightning's text advertised `best`, `hpc` and `registry`, which a proxycomp run refuses."""
    rc, out, _ = run(["fit", "--help"], capsys)
    text = " ".join(_options(out)["--ckpt_path CKPT_PATH"].split())
    assert rc == 0 and text.startswith("fit: resume a run from this checkpoint where it stopped")
    assert "last: with a run's config.yaml as --config that run's checkpoints/last.ckpt" in text
    assert not {"best", "hpc", "registry"} & set(re.findall(r"\w+", text))


def test_run_name_names_every_run_folder(recipe):
    cli = build_cli(["--config", str(recipe), "--run_name", "own_jsonl"], run=False)
    assert [Path(logger.log_dir) for logger in cli.trainer.loggers] == [
        Path("runs/own_jsonl/version_0"), Path("runs/tb/own_jsonl/version_0")]


@pytest.mark.parametrize("argv, fragment", [
    (["fit"], "fit: error: fit needs a recipe: --config recipes/smoke/proxy_spm.yaml"),
    (["fit", "--config", "short.yaml"], "fit: error: trainer.max_steps is not set: it is the run's length"),
    (["fit", "--config", "tiny.yaml", "--trainer.max_steps", "0"], "fit: error: trainer.max_steps is 0"),
    (["validate", "--ckpt_path", "last"], "validate: error: validate needs the config the checkpoint was trained with"),
    (["validate", "--config", "tiny.yaml"], "validate: error: validate needs --ckpt_path: a .ckpt, or last"),
])
def test_a_call_without_what_the_run_needs_says_what_in_one_line(recipe, capsys, argv, fragment):
    """Said before anything is seeded, resolved or loaded: stderr holds that line alone."""
    recipe.with_name("short.yaml").write_text(TINY_RECIPE.replace("  max_steps: 5\n", ""))
    rc, _, err = run(argv, capsys)
    assert rc == 2 and err.splitlines() == [err.strip()] and err.startswith(f"proxycomp {fragment}")


def test_a_failed_fit_leaves_no_run_folder(recipe, capsys, tmp_path, lightning_log):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "latin.py").write_bytes(b"caf\xe9 = 1\n" * 40)
    rc, _, err = run(["fit", "--config", str(recipe), "--data.corpus.source", "folder", "--data.corpus.path",
                      str(tmp_path / "src")], capsys)
    assert_one_line_error(rc, err, "fit", "latin.py: not valid UTF-8", "--data.corpus.on_invalid_utf8 skip")
    assert not Path("runs").exists()
    # Lines Lightning says on every run came before the error line; the run's own first line says the device.
    assert not [n for n in ("Seed set to", "GPU available", "TPU available") if n in lightning_log.text]


def test_own_data_flags(recipe, capsys, tmp_path):
    rc, _, err = run(["fit", "--config", str(recipe), "--data.corpus.path", str(tmp_path)], capsys)
    assert_one_line_error(rc, err, "fit", "data.corpus.path is set but data.corpus.source is python-sources")
    cli = build_cli(["--config", str(recipe), "--data.corpus.source", "folder", "--data.corpus.path", str(tmp_path),
                     "--data.corpus.on_invalid_utf8", "skip", "--data.corpus.glob", '["**/*.py", "**/*.rs"]',
                     "--data.corpus.exclude", '["vendor", "*.min.js"]'], run=False)
    corpus = cli.datamodule.config.corpus
    assert (corpus.on_invalid_utf8, corpus.glob, corpus.exclude) == ("skip", ("**/*.py", "**/*.rs"),
                                                                      ("vendor", "*.min.js"))


class FillingDisk(io.FileIO):
    """A file on a disk with `room` bytes left: the write that would pass them fails with ENOSPC, as the kernel's does,
    under torch.save (whose zip writer then raises an error of its own)."""

    room = 4096

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_keeps_the_last_checkpoint(run_copy, capsys, monkeypatch):
    last = run_copy / "checkpoints" / "last.ckpt"
    saved = last.read_bytes()
    monkeypatch.setattr(checkpoint_module, "open", lambda path, mode: FillingDisk(path, mode.replace("b", "")),
                        raising=False)
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--trainer.max_steps", "6", "--ckpt_path", "last"], capsys)
    assert_one_line_error(rc, err, "fit", "no space left on device for runs/proxycomp/version_0/checkpoints/", "intact")
    assert last.read_bytes() == saved and not list(last.parent.glob(".*tmp*"))


def test_a_full_disk_outside_checkpoints_is_one_line(monkeypatch, capsys):
    def full(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/metrics.csv")

    monkeypatch.setitem(proxycomp_cli.VERBS, "generate", (full, ""))
    rc, _, err = run(["generate"], capsys)
    assert_one_line_error(rc, err, "generate", "no space left on device for runs/x/metrics.csv")


def test_ctrl_c_stops_after_the_step_with_validation_and_a_checkpoint(recipe, capsys, monkeypatch):
    class CtrlCAtStep2(StopAtStepBoundary):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2 and not self.interrupted:
                signal.raise_signal(signal.SIGINT)
            super().on_train_batch_end(trainer, *args)

    monkeypatch.setattr(lightning_cli, "StopAtStepBoundary", CtrlCAtStep2)
    # A shell starts background jobs with SIGINT ignored; give the run the handler an interactive Python has.
    started_with = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc, _, err = run(["fit", "--config", str(recipe)], capsys)
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, started_with)
    assert rc == 130 and "stopped by Ctrl-C at step 2; go on with --ckpt_path last" in err
    folder = Path("runs/proxycomp/version_0")
    assert step_of(folder / "checkpoints" / "last.ckpt") == 2 and len(val_steps(folder)) == 1
    assert after is signal.default_int_handler


@pytest.mark.slow
def test_init_from_starts_a_new_run_from_the_weights_and_tokenizer(run_copy, capsys, monkeypatch):
    checkpoint = torch.load(run_copy / "checkpoints" / "last.ckpt", weights_only=True)
    started = []
    monkeypatch.setattr(lightning_cli.ProxyCLI, "fit", lambda self, model, **kwargs: started.append(self))
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--init_from", str(run_copy / "checkpoints" / "last.ckpt")],
                     capsys)
    assert rc == 0, err
    cli = started[0]
    assert cli.trainer.global_step == 0 and cli.config_init.fit.ckpt_path is None  # a new run, new schedule
    for key, value in cli.model.state_dict().items():
        assert torch.equal(value, checkpoint["state_dict"][key]), key
    assert cli.datamodule.spm_model == checkpoint["ProxyDataModule"]["spm_model"]
    Path("byte.yaml").write_text(TINY_RECIPE.replace("names: [raw, spm], spm_vocab_size: 512", "names: [raw]"))
    rc, _, err = run(["fit", "--config", "byte.yaml", "--init_from", str(run_copy / "checkpoints" / "last.ckpt")],
                     capsys)
    assert_one_line_error(rc, err, "fit", "its weights do not fit this model")
    rc, _, err = run(["fit", "--config", "tiny.yaml", "--init_from", "x.ckpt", "--ckpt_path", "last"], capsys)
    assert_one_line_error(rc, err, "fit", "pass one of them")


@pytest.mark.slow
def test_generate_continues_the_prompt(trained, capsys):
    rc, out, _ = run(["generate", "--ckpt", str(trained / "checkpoints" / "last.ckpt"), "--prompt", "def fib(",
                      "--max_bytes", "16", "--seed", "1"], capsys)
    assert rc == 0 and out.startswith("def fib(")
    # A prompt that is not UTF-8 (a shell passes bytes; Python holds them as surrogates) is read as its bytes.
    rc, out, _ = run(["generate", "--ckpt", str(trained / "checkpoints" / "last.ckpt"), "--prompt", "caf\udce9 (",
                      "--max_bytes", "4"], capsys)
    assert rc == 0 and out.startswith("caf\ufffd (")


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
    rc, _, err = run(["eval-bpb", "--ckpt", str(trained / "checkpoints" / "last.ckpt"), "--data", str(tmp_path),
                      "--seq_len", "128"], capsys)
    assert rc == 0 and "warning: --seq_len 128 is longer than the 64 symbols the model was trained on" in err


def test_eval_bpb_progress_line(capsys):
    proxycomp_cli._progress_line(2_000_000, every_s=0)(500_000)
    assert capsys.readouterr().err.startswith("eval-bpb: 0.50 of 2.00 MB scored (25%")


def test_unknown_command(capsys):
    rc, _, err = run(["trian"], capsys)
    assert rc == 2 and err.startswith("proxycomp: error: unknown command 'trian'; use one of fit, validate")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("verb", [["generate", "--prompt", "x"], ["eval-bpb", "--data", "tiny.yaml"]])
def test_a_device_this_machine_lacks_is_named(recipe, capsys, verb):
    """torch's failure to map the weights to CUDA was reported as the checkpoint's."""
    torch.save({"hyper_parameters": {}, "state_dict": {}}, "model.ckpt")
    rc, _, err = run([verb[0], "--ckpt", "model.ckpt", "--device", "cuda", *verb[1:]], capsys)
    assert_one_line_error(rc, err, verb[0], "--device cuda: this machine has no CUDA GPU", "use --device cpu")


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
        (["--model.arch.attn_backend", "xformers"],
         ["unknown model.arch.attn_backend 'xformers'", "sdpa, triton, flash_attn, flex"]),
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


@pytest.mark.parametrize("verb", [["fit"], ["rl", "--ckpt", "x.ckpt"]])
def test_a_yaml_syntax_error_names_the_file(recipe, capsys, verb):
    """jsonargparse parses the file's text, so YAML named it "<unicode string>"."""
    recipe.write_text("trainer:\n  max_steps: [5\n")
    rc, _, err = run([verb[0], "--config", "tiny.yaml", *verb[1:]], capsys)
    assert_one_line_error(rc, err, verb[0], "in tiny.yaml, line 2")
    assert "<unicode string>" not in err


def test_rl_with_a_bad_checkpoint_writes_nothing(recipe, capsys):
    """It left OUT/config.json behind."""
    rc, _, err = run(["rl", "--ckpt", "none.ckpt", "--out", "runs/rl"], capsys)
    assert_one_line_error(rc, err, "rl", "none.ckpt does not exist")
    assert not Path("runs").exists()


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
    """Real data module and CLI wiring: 5 steps straight == 3 steps, checkpoint, resume for 2 more."""
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
    assert len(straight.losses) == 5
    assert first.losses + second.losses == pytest.approx(straight.losses, abs=1e-5)


def test_rl_config_typo_is_one_line_error(capsys, tmp_path):
    bad = tmp_path / "rl.yaml"
    bad.write_text("stepz: 3\n")
    assert main(["rl", "--config", str(bad), "--ckpt", str(tmp_path / "none.ckpt")]) != 0
    err = capsys.readouterr().err.strip()
    assert "stepz" in err and "Traceback" not in err


def _options(help_text: str) -> dict[str, str]:
    """Each option of a --help text with its description (argparse's layout: the option at 2 spaces, its text after
    it on the same line or on the next ones)."""
    section = help_text.split("\noptions:", 1)[-1]
    entries = re.split(r"\n(?=  -)", section)
    options = {}
    for entry in entries:
        match = re.match(r"\s*(-\S+(?: [^\s,]+)?(?:, --\S+(?: \S+)?)?)\s*(.*)", " ".join(entry.split()))
        if match and match.group(1).startswith("-"):
            options[match.group(1)] = match.group(2)
    return options


def _tool_help(module: str, entry: str, capsys, monkeypatch) -> str:
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit):
        getattr(importlib.import_module(module), entry)(*([["--help"]] if entry in ("parse_args",) else []))
    return capsys.readouterr().out


HELP_VERBS = [["fit"], ["validate"], ["generate"], ["eval-bpb"], ["gym"], ["gym", "eval"], ["gym", "bench"],
              ["gym", "generate"], ["rl"], ["compare"], ["shards", "split"], ["shards", "join"]]
TOOLS = [("proxycomp.bench.data", "main"), ("proxycomp.bench.decode", "main"), ("proxycomp.bench.kernels", "main"),
         ("proxycomp.bench.train", "parse_args"), ("proxycomp.gym_bridge.rl.compare", "main")]


@pytest.mark.parametrize("verb", HELP_VERBS + TOOLS, ids=lambda v: " ".join(v) if isinstance(v, list) else v[0])
def test_every_option_is_described_in_one_flag_style(verb, capsys, monkeypatch):
    if isinstance(verb, list):
        rc, text, _ = run([*verb, "--help"], capsys)
        assert rc == 0
    else:
        text = _tool_help(*verb, capsys, monkeypatch)
    options = _options(text)
    assert options, text[:500]
    undescribed = [flag for flag, description in options.items() if not description or description.startswith("(type")]
    assert not undescribed, undescribed
    dashed = [flag for flag in re.findall(r"(?<![\w-])--[A-Za-z][\w.-]*", text) if "-" in flag[2:]]
    assert not dashed, dashed  # snake_case flags, dotted for nested fields


def test_the_top_level_usage_describes_every_verb(capsys):
    rc, out, _ = run(["--help"], capsys)
    assert rc == 0
    for verb in proxycomp_cli.VERBS:
        assert re.search(rf"^  {verb} +\w", out, re.M), verb


@pytest.mark.parametrize("argv, flag", [
    (["rl", "--ckpt", "x.ckpt", "--rollout.turn", "2"], "--rollout.turn"),
    (["fit", "--trainer.max_step", "5"], "--trainer.max_step"),
    (["generate", "--ckpt", "x.ckpt", "--prompt", "x", "--max_byte", "4"], "--max_byte"),
    (["eval-bpb", "--ckpt", "x.ckpt", "--dat", "src"], "--dat"),
    (["rl-compare", "--out", "x", "--summarize"], "--summarize"),
])
def test_abbreviated_flags_are_refused(argv, flag, capsys):
    rc, _, err = run(argv, capsys)
    assert_one_line_error(rc, err, argv[0], f"unrecognized arguments: {flag}")

