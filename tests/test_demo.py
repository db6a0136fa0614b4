"""What `make demo` tells a newcomer about what they see: a sample of whitespace that does not look broken, why a
kernel failed, how little its before/after table measures, and what the kernel tuning cost the model."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("demo", ROOT / "tools" / "demo.py")
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)


def test_a_sample_of_whitespace_is_shown():
    """`def fib(` then two newlines and 200 spaces printed as an empty screen."""
    assert demo.visible("def fib(\n\n" + " " * 200) == "def fib(⏎\n⏎\n·×200"
    assert demo.visible("    x = 1") == "·×4x = 1"


def test_the_rl_report_says_why_kernels_failed_and_what_the_run_does_not_show(tmp_path):
    config = {"tasks": ["relu", "silu"], "steps": 2, "evaluation": {"samples_per_task": 2, "turns": 1}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    turns = [
        {"step": 1, "task": "relu", "episode": 0, "turn": 0, "reward": 1.0, "status": "ok",
         "feedback": "status: ok (timing unavailable (cpu): reward = correctness term only)"},
        {"step": 1, "task": "relu", "episode": 0, "turn": 1, "reward": 0.0, "status": "error",
         "feedback": "status: error (SyntaxError: unmatched ')' (line 1))\nerror:\n..."},
    ]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    (tmp_path / "code_bpb.json").write_text(json.dumps({"initial (--ckpt)": 4.1, "after 2 steps": 9.7}))
    report = demo.rl_report(tmp_path)
    assert "turn 1 answers a prompt holding its turn-0 code and the gym's verdict on it" in report
    assert "turn 0: reward 1.00  ok\n" in report and "turn 1: reward 0.00  error (SyntaxError: unmatched" in report
    assert "4 evaluation episodes" in report and "one episode moves a rate by 25%" in report
    assert "not that RL helped" in report
    assert "initial (--ckpt) 4.10, after 2 steps 9.70" in report and "worse than a uniform guess" in report


@pytest.mark.slow
def test_the_demo_says_what_it_shows_without_warnings_or_files_outside_runs(tmp_path):
    """`make demo` as a shell runs it, shortened (a few fit steps, one RL step on a short warm start): it printed a
    Lightning FutureWarning, a sample that looked empty, metric names, and no figure of what tuning cost the model."""
    fit = ["--trainer.max_steps", "12", "--trainer.val_check_interval", "12", "--data.corpus.max_documents", "120"]
    rl = ["--warmstart.steps", "4", "--warmstart.log_every", "4", "--steps", "1", "--save_every", "1",
          "--rollout.samples_per_task", "2", "--evaluation.code_bytes", "4000"]
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "demo.py"), *fit, "--rl", *rl], cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    # A warning names the library line that raised it: `.../lightning/pytorch/utilities/_pytree.py:21: ...`.
    assert "Traceback" not in result.stderr and not re.search(r"\.py:\d+: ", result.stderr), result.stderr
    out = result.stdout
    assert "after 12 steps" in out and "8 bits is a uniform guess over byte values, and lower is better" in out
    sample = out.split("sample (temperature 0.7):\n", 1)[1].split("\n\n== kernel RL", 1)[0]
    assert sample.startswith("def fib(") and "    " not in sample and "\n\n" not in sample, sample
    assert "step 1: mean reward " in out and "reward/mean" not in out
    assert "what the gym said of each kernel the policy wrote" in out and "not that RL helped" in out
    for verdict in re.findall(r"episode \d turn \d: reward [\d.]+  (.*)", out):
        assert verdict == "ok" or re.fullmatch(r"\w+ \(.+\)", verdict), verdict  # a failure says why
    # What the tuning cost the model on code it was not trained on, before and after.
    assert re.search(r"bits per byte on proxycomp's own sources .*: initial \(--ckpt\) \d+\.\d\d, before RL "
                     r"\(after SFT\) \d+\.\d\d, after 1 steps \d+\.\d\d\.", out), out
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]  # runs/ is git-ignored (test_docs)
