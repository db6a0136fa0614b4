"""Byte vs proxy vs tokenizer at equal compute (proxycomp.compare.cli).

    python tools/compare_baselines.py --preset cpu_smoke --out runs/compare_smoke
    python tools/compare_baselines.py --budget 2e15 --budget-unit flops \\
        --arms byte,proxy_spm,proxy_zstd,proxy_brotli,bpe,raw_subset --model-size tiny --out runs/compare
    python tools/compare_baselines.py --preset h200_small --arms byte --out $OUT/h200_small --work-dir /tmp/pc
"""
import sys

from proxycomp.compare.cli import main

if __name__ == "__main__":
    sys.exit(main())
