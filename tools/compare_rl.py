"""Advantage estimators side by side at equal budget: an alias of `proxycomp rl-compare`.

    python tools/compare_rl.py --config recipes/rl/h200_compare.yaml --ckpt RUN/checkpoints/last.ckpt \
        --out runs/rl_compare [--estimators trloo,grpo] [--parallel] [-- --steps 4 ...any rl override...]
    python tools/compare_rl.py --out runs/rl_compare --summarize_only   # re-read the runs, e.g. after a kill
    python tools/compare_rl.py --config ... --ckpt ... --out runs/rl_compare --resume [--max_time_s 540]
"""
import sys

from proxycomp.cli import main

if __name__ == "__main__":
    sys.exit(main(["rl-compare", *sys.argv[1:]]))
