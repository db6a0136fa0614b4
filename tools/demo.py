"""`make demo`: proxy-compression pretraining in a few CPU minutes, through the real CLI.

Builds the smoke recipe recipes/smoke/proxy_spm.yaml with the `proxycomp fit` parser (links, trainer
defaults, loggers, checkpointing), measures the untrained model's bits per raw byte on the held-out
packages, trains (raw + SentencePiece views of this interpreter's own .py files), measures again,
then samples a continuation of "def fib(" from the saved checkpoint with `proxycomp generate`. Last, the
pretrained model goes on as a kernel-writing policy: `proxycomp rl` with recipes/rl/demo_cpu.yaml warm-starts it
on the kernel corpus and runs a short multi-turn TRLOO episode on gym tasks, and the demo prints what the gym said
of each kernel it wrote.
Extra arguments are passed on as CLI overrides, e.g. `python tools/demo.py --trainer.max_steps 100`.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "smoke" / "proxy_spm.yaml"
RL_RECIPE = ROOT / "recipes" / "rl" / "demo_cpu.yaml"


def main(overrides: list[str]) -> int:
    from proxycomp.cli import build_cli
    from proxycomp.cli import main as proxycomp

    start = time.perf_counter()
    cli = build_cli(["--config", str(RECIPE), *overrides], run=False)
    trainer, lm, data = cli.trainer, cli.model, cli.datamodule
    untrained = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
    trainer.fit(lm, data)
    trained = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
    checkpoint = trainer.checkpoint_callback.last_model_path

    print(f"\nval bits per raw byte (held-out packages): untrained {untrained:.3f} -> trained {trained:.3f} "
          f"after {trainer.global_step} steps ({time.perf_counter() - start:.0f} s)")
    print(f"run folder: {trainer.log_dir}\ncheckpoint: {checkpoint}\n\nsample (temperature 0.7):")
    status = proxycomp(["generate", "--ckpt", checkpoint, "--prompt", "def fib(", "--max_bytes", "200",
                        "--temperature", "0.7", "--top_p", "0.95", "--seed", "0"])
    if trained >= untrained:
        print("demo: training did not lower bits per byte", file=sys.stderr)
        return 1
    if status:
        return status

    rl_out = Path(trainer.log_dir) / "rl"
    print(f"\n== kernel RL: warm start, then multi-turn TRLOO in the gym ({RL_RECIPE.name}) ==", flush=True)
    status = proxycomp(["rl", "--config", str(RL_RECIPE), "--ckpt", checkpoint, "--out", str(rl_out)])
    if status:
        return status
    print("\nwhat the gym said of each kernel the policy wrote:")
    for line in (rl_out / "rollouts.jsonl").read_text().splitlines():
        turn = json.loads(line)
        verdict = turn["feedback"].splitlines()[0] if turn["feedback"] else ""
        print(f"  step {turn['step']} {turn['task']:<5} episode {turn['episode']} turn {turn['turn']}: "
              f"reward {turn['reward']:.2f}  {verdict}")
    print(f"\ndemo done in {time.perf_counter() - start:.0f} s; RL run folder: {rl_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
