"""Data pipeline throughput per view, per CPU core (proxycomp.bench.data).

    python tools/bench_data.py [--max_documents 400] [--record]
"""
import sys

from proxycomp.bench.data import main

if __name__ == "__main__":
    sys.exit(main())
