"""Time the sampler's decode loops on one model (proxycomp.bench.decode).

    python tools/bench_decode.py --ckpt RUN/checkpoints/last.ckpt [--batch 8] [--prompt 1024] [--new 2048]
    python tools/bench_decode.py --d_model 512 --layers 8      # a randomly initialised model of that size
"""
import sys

from proxycomp.bench.decode import main

if __name__ == "__main__":
    sys.exit(main())
