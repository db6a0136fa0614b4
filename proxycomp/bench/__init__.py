"""The benchmarks behind `tools/bench_*.py`: one module per benchmark, each with a `main(argv)`.

The recording ones append dated blocks to their own section of BENCHMARKS.md (`--record`, `--benchmarks PATH`)
through `record`, which `proxycomp gym bench --record` uses too.
"""
