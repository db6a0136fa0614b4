"""Data pipeline throughput per view: MB/s of raw input per CPU core and symbols/s, encode + pack; and what the
batches hold.

Each view runs alone (r = 1, or raw only) through the real `TrainStream` in this process, one pass over
the same documents, timed by process CPU time so the figure is per core even on a busy machine. Then the first
batches of the paper schedule with spm (its paired warmup) are read for distinct documents per batch and the share
of rows that hold a whole pair (`TrainStream.report`, the figures of the data manifest).

    python tools/bench_data.py [--max_documents 400] [--record]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from proxycomp.bench.record import add_benchmarks_option, append_block
from proxycomp.data import CorpusConfig, MixingSchedule, TrainStream, load_corpus
from proxycomp.defaults import SPM_VOCAB_SIZE
from proxycomp.views import ViewConfig, train_spm

BENCHMARKS = Path("BENCHMARKS.md")  # --benchmarks' default
SECTION = "## Data pipeline"


def measure(view: str, docs: list[bytes], config: ViewConfig, spm_model: bytes, seq_len: int) -> dict:
    schedule = MixingSchedule("byte") if view == "raw" else MixingSchedule("sentinel", r_peak=1.0)
    only = dataclasses.replace(config, names=("raw",) if view == "raw" else ("raw", view))
    stream = iter(TrainStream(docs, only, spm_model, schedule, seq_len, batch_size=1, seed=0))
    start_cpu, start_wall, windows = time.process_time(), time.perf_counter(), 0
    while True:  # one epoch: until the first unfinished document is past the last one
        cursor = next(stream)["stream_cursor"].tolist()
        windows += 1
        if cursor[2] >= len(docs):
            break
    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start_wall
    raw_bytes = sum(map(len, docs))
    return {"view": view, "mb_per_s": raw_bytes / cpu / 1e6, "symbols_per_s": windows * seq_len / cpu,
            "bytes_per_symbol": raw_bytes / (windows * seq_len), "cpu_s": cpu, "wall_s": wall}


def table(rows: list[dict]) -> str:
    lines = ["| view | MB/s raw per core | symbols/s per core | raw bytes/symbol | CPU s |", "|---|---|---|---|---|"]
    lines += [f"| {r['view']} | {r['mb_per_s']:.1f} | {r['symbols_per_s'] / 1e6:.2f} M | {r['bytes_per_symbol']:.2f} "
              f"| {r['cpu_s']:.2f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--max_documents", type=int, default=400, help="python-sources sample size")
    p.add_argument("--spm_vocab_size", type=int, default=SPM_VOCAB_SIZE, help="SentencePiece pieces")
    p.add_argument("--spm_train_bytes", type=int, default=10_000_000, help="bytes the SentencePiece model trains on")
    p.add_argument("--zstd_level", type=int, default=3, help="zstd compression level")
    p.add_argument("--brotli_quality", type=int, default=5, help="brotli quality")
    p.add_argument("--seq_len", type=int, default=2048, help="symbols per packed window")
    p.add_argument("--batch_size", type=int, default=32, help="rows of the batches whose contents are reported")
    p.add_argument("--report_batches", type=int, default=8, help="batches the contents are averaged over")
    p.add_argument("--device_note", default="this machine", help="what to call the machine in BENCHMARKS.md")
    p.add_argument("--record", action="store_true", help="append a dated block to BENCHMARKS.md")
    add_benchmarks_option(p, BENCHMARKS)
    args = p.parse_args(argv)

    corpus = load_corpus(CorpusConfig(max_documents=args.max_documents))
    docs = [d.data for d in corpus.train]
    config = ViewConfig(("raw", "spm", "zstd", "brotli"), spm_vocab_size=args.spm_vocab_size,
                        zstd_level=args.zstd_level, brotli_quality=args.brotli_quality)
    t = time.perf_counter()
    spm_model = train_spm(docs, args.spm_vocab_size, args.spm_train_bytes)
    spm_train_s = time.perf_counter() - t
    rows = [measure(view, docs, config, spm_model, args.seq_len) for view in config.names]
    warmup = TrainStream(docs, dataclasses.replace(config, names=("raw", "spm")), spm_model,
                         MixingSchedule("paper", total_steps=100 * args.report_batches), args.seq_len,
                         args.batch_size, seed=0).report(args.report_batches)
    summary = (f"{len(docs)} python-sources train documents, {sum(map(len, docs)) / 1e6:.1f} MB; seq_len "
               f"{args.seq_len}; zstd level {args.zstd_level}, brotli quality {args.brotli_quality}, spm vocab "
               f"{args.spm_vocab_size} (trained in {spm_train_s:.1f} s wall on {os.cpu_count()} cores). First "
               f"{args.report_batches} batches of {args.batch_size} rows, paper schedule with spm (paired warmup): "
               f"{warmup['documents_per_batch']:.1f} distinct documents per batch, "
               f"{warmup['paired_row_share']:.0%} of rows hold a whole pair")
    print(summary)
    print(table(rows))
    if args.record:
        command = "python tools/bench_data.py " + " ".join(argv if argv is not None else sys.argv[1:])
        stamp = datetime.date.today().isoformat()
        append_block(args.benchmarks, SECTION,
                     f"### {stamp}: {args.device_note} ({platform.processor() or platform.machine()}, "
                     f"{os.cpu_count()} cores, Python {platform.python_version()})\n\n`{command.strip()}`\n\n"
                     f"{summary}.\n\n{table(rows)}\n")
        print(f"recorded in {args.benchmarks}")
    return 0
