"""`proxycomp compare`: byte vs proxy vs tokenizer at equal compute; trains every arm, scores it, writes table,
JSON and plot.

    proxycomp compare --preset cpu_smoke --out runs/compare_smoke
    proxycomp compare --budget 2e15 --match flops --model_size tiny \\
        --arms byte,proxy_spm,proxy_spm_masked,raw_subset,proxy_zstd,proxy_brotli,bpe --out runs/compare
    proxycomp compare --preset h200_small --arms byte,proxy_spm,proxy_spm_masked,raw_subset --seeds 0,1,2 --out $OUT/s
    proxycomp compare --across results/small,results/base --out results/sizes   # the contrasts side by side

Settings come from CompareSpec's defaults, then the preset (a shipped name or a YAML file of CompareSpec fields),
then the flags: every field is one (`--corpus.max_documents 300`). Run again with the same --out to resume:
finished runs (an arm at a seed) are skipped, an interrupted one continues from its last checkpoint in --work_dir.
--arms and --seeds may differ between calls into one --out: the table shows every run made so far. Runs go seed by
seed (seed 0 of every arm, then seed 1), so a call cut short leaves whole seeds for the paired contrasts.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from proxycomp.command import command_parser
from proxycomp.compare.arms import ARMS, CompareError, parse_arms
from proxycomp.compare.report import across_markdown, plot_across
from proxycomp.compare.runner import RESULTS_FILE, SPM_FILE, Comparison
from proxycomp.compare.spec import CompareSpec, preset_path
from proxycomp.files import write_atomic

ACROSS_FILE = "across.md"


def _parser():
    p = command_parser("proxycomp compare", __doc__.split("\n\n")[0])
    p.add_argument("--preset", action="config", help="a shipped preset (cpu_smoke, h200_small, h200_base, "
                                                     "h200_fidelity) or a YAML file of the fields below; later "
                                                     "flags override it")
    p.add_argument("--out", required=True, help="results folder (JSON, table, plot, tokenizer); resumed if it exists")
    p.add_argument("--work_dir", help="checkpoints and logs; null: OUT/work")
    p.add_argument("--resume_from", help="a results folder of an earlier call (e.g. fetched from a device) to "
                                         "continue in --out; its results.json and spm.model are copied there first")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {','.join(ARMS)}")
    p.add_argument("--seeds", help="comma-separated training seeds (initialization, document order, view draws); each "
                                   "arm runs once per seed, the table gives the mean and spread; default: --seed")
    p.add_argument("--dry_run", action="store_true", help="print each arm's plan and stop")
    p.add_argument("--across", help="comma-separated results folders (e.g. two model sizes at one ratio): write each "
                                    "contrast at each of them to OUT/across.md and OUT/gap_vs_size.png, and stop")
    p.add_class_arguments(CompareSpec, None, as_group=True)
    return p


def seed_results(source: Path, out: Path) -> None:
    """Copy an earlier call's results.json and spm.model into `out`, unless `out` already has results."""
    if not (source / RESULTS_FILE).is_file():
        raise CompareError(f"--resume_from {source}: no {RESULTS_FILE} there; pass the folder an earlier call wrote")
    if (out / RESULTS_FILE).is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in (RESULTS_FILE, SPM_FILE):
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CompareError(f"--seeds takes comma-separated integers such as 0,1; got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise CompareError(f"--seeds needs distinct seeds, got {text!r}")
    return seeds


def parse_spec(argv: Sequence[str]):
    """(CompareSpec, the other arguments). A preset named without a path is a shipped one."""
    argv = list(argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--preset":
            argv[i + 1] = str(preset_path(argv[i + 1]))
    parser = _parser()
    args = parser.instantiate_classes(parser.parse_args(argv))
    spec = CompareSpec(**{name: args[name] for name in CompareSpec.__dataclass_fields__})
    return spec, args


def across(folders: Sequence[Path], out: Path) -> None:
    points = []
    for folder in folders:
        path = folder / RESULTS_FILE
        if not path.is_file():
            raise CompareError(f"--across {folder}: no {RESULTS_FILE} there")
        try:
            points.append(json.loads(path.read_text()))
        except json.JSONDecodeError as err:
            raise CompareError(f"--across {path}: not valid JSON ({err.msg})") from None
    out.mkdir(parents=True, exist_ok=True)
    table = across_markdown(points)
    write_atomic(out / ACROSS_FILE, table + "\n")
    plot_across(points, out / "gap_vs_size.png")
    print(table)


def main(argv: Sequence[str]) -> int:
    spec, args = parse_spec(argv)
    if args.across:
        across([Path(p.strip()) for p in args.across.split(",") if p.strip()], Path(args.out))
        return 0
    arms = parse_arms(args.arms)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    if args.resume_from:
        seed_results(Path(args.resume_from), Path(args.out))
    comparison = Comparison(spec, args.out, args.work_dir)
    if args.dry_run:
        for plan in comparison.dry_run(arms):
            print(f"{plan.arm:>16}: vocab {plan.vocab_size:>6}  {plan.flops_per_symbol:.3g} FLOPs/symbol  "
                  f"{plan.max_steps:>7} steps  {plan.symbols:.3g} symbols  {plan.flops:.3g} FLOPs")
        return 0
    comparison.run(arms, seeds)
    print(f"results in {args.out}: results.md, results.json, bpb_vs_compute.png")
    return 0
