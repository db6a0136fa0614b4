"""What `make demo` tells a newcomer about what they see: a sample of whitespace that does not look broken, why a
kernel failed, how little its before/after table measures, and what the kernel tuning cost the model."""
import importlib.util
import json
from pathlib import Path

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
