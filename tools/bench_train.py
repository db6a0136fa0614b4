"""Training throughput of the byte model beside a plain PyTorch loop (proxycomp.bench.train).

    python tools/bench_train.py --sizes h200 --out train.json [--models d768] [--arms fit-triton,plain] \
        [--windows spm] [--record]
    python tools/bench_train.py --sizes tiny    # CPU, seconds: every path runs; the figures mean nothing
"""
import sys

from proxycomp.bench.train import main

if __name__ == "__main__":
    sys.exit(main())
