"""Byte vs proxy vs tokenizer at equal compute: train every arm, score it, write table, JSON and plot.

    python tools/compare_baselines.py --preset cpu_smoke --out runs/compare_smoke
    python tools/compare_baselines.py --budget 2e15 --budget-unit flops \\
        --arms byte,proxy_spm,proxy_zstd,proxy_brotli,bpe,raw_subset --model-size tiny --out runs/compare
    python tools/compare_baselines.py --preset h200_small --arms byte --out $OUT/h200_small --work-dir /tmp/pc

Settings come from CompareSpec's defaults, then the preset (recipes/baselines/NAME.yaml), then the flags
(--set FIELD=VALUE for any other field). Run again with the same --out to resume: finished arms are skipped,
an interrupted arm continues from its last checkpoint in --work-dir. Bad input ends in one line, exit 2.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from proxycomp.compare import ARMS, CompareError, Comparison, build_spec, parse_arms
from proxycomp.compare.budget import BUDGET_UNITS
from proxycomp.compare.runner import RESULTS_FILE, SPM_FILE
from proxycomp.compare.spec import parse_assignment


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="compare_baselines", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="results folder (JSON, table, plot, tokenizer); resumed if it exists")
    p.add_argument("--work-dir", help="checkpoints, logs, replay stream (default OUT/work)")
    p.add_argument("--resume-from", help="a results folder of an earlier call (e.g. fetched from a device) to "
                                         "continue in --out; its results.json and spm.model are copied there first")
    p.add_argument("--preset", help="recipes/baselines/NAME.yaml or a path to such a file")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {','.join(ARMS)} (default all)")
    p.add_argument("--budget", type=float, help="compute per arm")
    p.add_argument("--budget-unit", choices=BUDGET_UNITS, help="what --budget counts (default flops)")
    p.add_argument("--model-size", help="tiny, small or base")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--source", help="corpus source (python-sources, folder, jsonl, parquet, hf)")
    p.add_argument("--path", help="corpus path for folder/jsonl/parquet/hf sources")
    p.add_argument("--max-documents", type=int, help="cap on corpus documents")
    p.add_argument("--num-workers", type=int, help="DataLoader workers per arm")
    p.add_argument("--attn-backend", help="sdpa, triton or flash_attn")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any other CompareSpec field")
    p.add_argument("--dry-run", action="store_true", help="print each arm's plan and stop")
    return p.parse_args(argv)


def seed_results(source: Path, out: Path) -> None:
    """Copy an earlier call's results.json and spm.model into `out`, unless `out` already has results."""
    if not (source / RESULTS_FILE).is_file():
        raise CompareError(f"--resume-from {source}: no {RESULTS_FILE} there; pass the folder an earlier call wrote")
    if (out / RESULTS_FILE).is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in (RESULTS_FILE, SPM_FILE):
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        overrides = dict(parse_assignment(a) for a in args.set)
        flags = {
            "budget": args.budget, "budget_unit": args.budget_unit, "model_size": args.model_size,
            "seq_len": args.seq_len, "batch_size": args.batch_size, "source": args.source, "path": args.path,
            "max_documents": args.max_documents, "num_workers": args.num_workers, "attn_backend": args.attn_backend,
        }
        overrides.update({k: v for k, v in flags.items() if v is not None})  # an unset flag keeps a --set value
        spec = build_spec(args.preset, overrides)
        arms = parse_arms(args.arms)
        if args.resume_from:
            seed_results(Path(args.resume_from), Path(args.out))
        comparison = Comparison(spec, args.out, args.work_dir)
        if args.dry_run:
            for plan in comparison.dry_run(arms):
                print(f"{plan.arm:>12}: vocab {plan.vocab_size:>6}  {plan.flops_per_symbol:.3g} FLOPs/symbol  "
                      f"{plan.max_steps:>7} steps  {plan.symbols:.3g} symbols  {plan.flops:.3g} FLOPs")
            if any(arm.name == "raw_subset" for arm in arms):
                print("  raw_subset: one pass over the raw views proxy_spm saw (steps known after proxy_spm)")
            return 0
        comparison.run(arms)
    except CompareError as err:
        print(f"compare_baselines: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except Exception as err:  # errors of the data, view and model layers that mean bad input
        from proxycomp.cli import user_errors

        if not isinstance(err, user_errors()):
            raise
        print(f"compare_baselines: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(f"results in {args.out}: results.md, results.json, bpb_vs_compute.png")
    return 0
