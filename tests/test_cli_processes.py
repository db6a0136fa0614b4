"""The `proxycomp` command as a shell runs it: separate processes with real pipes, signals, a file-size limit and
no GPU, which in-process tests cannot show (the exit status, what reaches a closed pipe, what a terminal prints)."""
import os
import resource
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_cli import TINY_RECIPE

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).with_name("proxycomp")
PROXYCOMP = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "proxycomp.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def one_line_error(result: subprocess.CompletedProcess, command: str, alone: bool = True) -> str:
    """The error line that ends a call with exit status 2: stderr's only line, or (`alone=False`: a run that had
    started) its last line, with no traceback before it."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1].startswith(f"proxycomp {command}: error: ") and (len(lines) == 1 or not alone), result.stderr
    return lines[-1]


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY_RECIPE)
    return tmp_path


@pytest.mark.slow
def test_the_modules_docs_name_run_the_verbs_with_their_errors(workdir):
    """`python -m` on the RL and gym modules did nothing and exited 0, unknown flags included."""
    rl = subprocess.run([sys.executable, "-m", "proxycomp.gym_bridge.rl.cli", "--ckpt", "x.ckpt", "--stepz", "1"],
                        cwd=workdir, env=ENV, capture_output=True, text=True)
    assert "unrecognized arguments: --stepz" in one_line_error(rl, "rl")
    gym = subprocess.run([sys.executable, "-m", "proxycomp.gym_bridge.cli", "tasks"], cwd=workdir, env=ENV,
                         capture_output=True, text=True)
    assert gym.returncode == 0 and "relu" in gym.stdout.split() and "silu" in gym.stdout.split(), gym.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_a_gpu_recipe_on_a_cpu_is_refused_before_the_corpus_is_read(workdir):
    env = {k: v for k, v in ENV.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([*PROXYCOMP, "fit", "--config", str(ROOT / "recipes/pretrain/proxy_spm.yaml")],
                            cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    line = one_line_error(result, "fit")
    assert "model.arch.attn_backend triton needs a CUDA GPU" in line and "--model.arch.attn_backend sdpa" in line
    assert not (workdir / "runs").exists()


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_leaves_no_run_folder(workdir):
    """The first checkpoint (864 kB) passes `ulimit -f`, every other file of the run (under 10 kB) does not."""
    def limit_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    result = subprocess.run([*PROXYCOMP, "fit", "--config", "tiny.yaml"], cwd=workdir, env=ENV, capture_output=True,
                            text=True, preexec_fn=limit_files, timeout=300)
    line = one_line_error(result, "fit", alone=False)
    assert "the file-size limit (ulimit -f) was reached for runs/proxycomp/version_0/checkpoints/" in line
    assert not (workdir / "runs").exists()  # nor runs/proxycomp/ or runs/tb/proxycomp/, emptied


@pytest.mark.slow
def test_ctrl_c_with_the_output_pipe_closed_stops_checkpointed(workdir):
    """`proxycomp fit ... | tee log` and Ctrl-C, which ends tee too: the fit's output is a pipe (so progress comes as
    lines, from the first step on), the pipe closes, SIGINT arrives before the first scheduled checkpoint. The stop
    still validates and checkpoints at the step boundary and exits 130, and the run folder stays."""
    with open(workdir / "stderr.txt", "w") as stderr:
        fit = subprocess.Popen([*PROXYCOMP, "fit", "--config", "tiny.yaml", "--trainer.max_steps", "100000",
                                "--trainer.val_check_interval", "100000", "--trainer.enable_progress_bar", "true"],
                               cwd=workdir, env=ENV, stdout=subprocess.PIPE, stderr=stderr)
        try:
            assert select.select([fit.stdout], [], [], 120)[0], "no progress line in 120 s"
            first = fit.stdout.readline().decode()
            fit.stdout.close()
            fit.send_signal(signal.SIGINT)
            rc = fit.wait(timeout=120)
        finally:
            fit.kill()
    assert first.startswith("step 1/100000  loss "), first
    log = (workdir / "stderr.txt").read_text()
    assert rc == 130, log
    run = Path("runs/proxycomp/version_0")
    step = torch.load(workdir / run / "checkpoints" / "last.ckpt", weights_only=True, mmap=True)["global_step"]
    assert step >= 1 and f"stopped by Ctrl-C at step {step}; go on with --ckpt_path last" in log
    # Where the run went, at its start and its end.
    assert f"fit: run folder {run}, checkpoints in {run / 'checkpoints'}; on cpu" in log
    assert f"fit: checkpoint {run / 'checkpoints' / 'last.ckpt'} at step {step}" in log
