"""`make demo`: proxy-compression pretraining in a few CPU minutes, through the real CLI.

Builds the smoke recipe recipes/smoke/proxy_spm.yaml with the `proxycomp fit` parser (links, trainer
defaults, loggers, checkpointing), measures the untrained model's bits per raw byte on the held-out
packages, trains (raw + SentencePiece views of this interpreter's own .py files), measures again,
then samples a continuation of "def fib(" from the saved checkpoint with `proxycomp generate`. Last, the
pretrained model goes on as a kernel-writing policy: `proxycomp rl` with recipes/rl/demo_cpu.yaml warm-starts it
on the kernel corpus and runs a short multi-turn TRLOO episode on gym tasks, and the demo prints what the gym said
of each kernel it wrote, and what the tuning cost the model on code it was not trained on.
Extra arguments are passed on as overrides of the fit recipe, and those after `--rl` as overrides of the RL recipe,
e.g. `python tools/demo.py --trainer.max_steps 100 --rl --warmstart.steps 50`.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "smoke" / "proxy_spm.yaml"
RL_RECIPE = ROOT / "recipes" / "rl" / "demo_cpu.yaml"
UNIFORM_BPB = 8.0  # a uniform guess over 256 byte values


def visible(text: str) -> str:
    """A sample with its whitespace shown: runs of spaces as ·×N, newlines as ⏎ (a sample of indentation alone
    would print as an empty screen)."""
    text = re.sub(r" {4,}", lambda m: f"·×{len(m.group())}", text)
    return text.replace("\t", "⇥").replace("\n", "⏎\n")


def pretraining_report(untrained: float, trained: float, steps: int, seconds: float) -> str:
    return (f"val bits per raw byte on held-out packages: untrained {untrained:.3f} -> trained {trained:.3f} after "
            f"{steps} steps ({seconds:.0f} s).\nFor scale: {UNIFORM_BPB:.0f} bits is a uniform guess over byte values, "
            "and lower is better. This 0.6M-parameter model has learnt which "
            "bytes are common in Python (indentation first), not how to write it, so its sample below is mostly "
            "whitespace and fragments; whitespace is shown as · (spaces) and ⏎ (newlines).")


def rl_report(rl_out: Path) -> str:
    """What the RL run shows, and what it does not: every kernel's verdict, the held-out table's size, and the
    bits per byte the tuning cost on code."""
    config = json.loads((rl_out / "config.json").read_text())
    lines = ["what the gym said of each kernel the policy wrote (turn 0 answers the task; turn 1 answers a prompt "
             "holding its turn-0 code and the gym's verdict on it):"]
    for line in (rl_out / "rollouts.jsonl").read_text().splitlines():
        turn = json.loads(line)
        # The first line of the gym's feedback says why a kernel failed; an ok one says only that it is ok.
        failed = turn["status"] != "ok" and turn["feedback"]
        verdict = turn["feedback"].splitlines()[0].removeprefix("status: ") if failed else turn["status"]
        lines.append(f"  step {turn['step']} {turn['task']:<5} episode {turn['episode']} turn {turn['turn']}: "
                     f"reward {turn['reward']:.2f}  {verdict}")
    evaluation = config["evaluation"]
    episodes = evaluation["samples_per_task"] * len(config["tasks"])
    lines.append(
        f"\nThe before/after table above is {episodes} evaluation episodes ({evaluation['samples_per_task']} per task, "
        f"{evaluation['turns']} turn) on the two tasks trained on, after {config['steps']} RL steps: one episode moves "
        f"a rate by {1 / episodes:.0%}, so it shows the path working, not that RL helped. On a CPU the reward is "
        "correctness alone (no timing), and the tasks are the train tasks, not held-out ones; docs/rl.md has "
        "longer runs, and the H200 runs with held-out tasks.")
    code_bpb = rl_out / "code_bpb.json"
    if code_bpb.is_file():
        figures = json.loads(code_bpb.read_text())
        lines.append(
            "\nbits per byte on proxycomp's own sources (code none of these models trained on): "
            + ", ".join(f"{phase} {bpb:.2f}" for phase, bpb in figures.items())
            + f". The warm start teaches a model this small a few kernels by heart and costs it much of what it knew "
              f"of other code (above {UNIFORM_BPB:.0f}: worse than a uniform guess, confidently wrong); the gym's "
              "rewards cannot show that.")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from proxycomp.lightning_cli import build_cli
    from proxycomp.cli import main as proxycomp
    from proxycomp.lightning_cli import ignore_library_warnings

    split = argv.index("--rl") if "--rl" in argv else len(argv)
    overrides, rl_overrides = argv[:split], argv[split + 1:]
    start = time.perf_counter()
    cli = build_cli(["--config", str(RECIPE), *overrides], run=False)
    trainer, lm, data = cli.trainer, cli.model, cli.datamodule
    with warnings.catch_warnings():
        ignore_library_warnings()
        untrained = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
        trainer.fit(lm, data)
        trained = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
    checkpoint = trainer.checkpoint_callback.last_model_path

    print(f"\n{pretraining_report(untrained, trained, trainer.global_step, time.perf_counter() - start)}")
    print(f"run folder: {trainer.log_dir}\ncheckpoint: {checkpoint}\n\nsample (temperature 0.7):")
    sample = io.StringIO()
    with contextlib.redirect_stdout(sample):
        status = proxycomp(["generate", "--ckpt", checkpoint, "--prompt", "def fib(", "--max_bytes", "200",
                            "--temperature", "0.7", "--top_p", "0.95", "--seed", "0"])
    print(visible(sample.getvalue().removesuffix("\n")))
    if trained >= untrained:
        print("demo: training did not lower bits per byte", file=sys.stderr)
        return 1
    if status:
        return status

    rl_out = Path(trainer.log_dir) / "rl"
    print(f"\n== kernel RL ({RL_RECIPE.name}) ==\nThe pretrained model now learns to write Triton kernels for two gym "
          "tasks, relu and silu: a supervised warm start on correct and broken variants of their solutions (with the "
          "gym's verdicts), then multi-turn TRLOO steps. The gym runs each kernel on the CPU in Triton's interpreter "
          "and rewards correctness.", flush=True)
    status = proxycomp(["rl", "--config", str(RL_RECIPE), "--ckpt", checkpoint, "--out", str(rl_out), *rl_overrides])
    if status:
        return status
    print(f"\n{rl_report(rl_out)}")
    print(f"\ndemo done in {time.perf_counter() - start:.0f} s; RL run folder: {rl_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
