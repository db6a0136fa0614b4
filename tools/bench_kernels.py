"""Benchmark proxycomp's Triton kernels on one GPU beside torch (proxycomp.bench.kernels).

    python tools/bench_kernels.py --out bench.json [--record] [--parts attention,embedding,flex,host,rope,sweep]
"""
import sys

from proxycomp.bench.kernels import main

if __name__ == "__main__":
    sys.exit(main())
