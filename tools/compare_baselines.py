"""Byte vs proxy vs tokenizer at equal compute: `proxycomp compare` (proxycomp.compare.cli).

    python tools/compare_baselines.py --preset cpu_smoke --out runs/compare_smoke
    python tools/compare_baselines.py --preset h200_small --arms byte,proxy_spm,proxy_spm_masked,raw_subset \
        --seeds 0,1,2 --out OUT
"""
import sys

from proxycomp.cli import main

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
