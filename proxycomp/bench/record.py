"""BENCHMARKS.md bookkeeping: every benchmark appends dated blocks to its own `## ` section."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def insert_in_section(text: str, heading: str, block: str) -> str:
    """`text` with `block` at the end of the `heading` section (before the next `## ` heading), or the
    section appended when absent."""
    block = "\n" + block.strip("\n") + "\n"
    start = text.find(f"\n{heading}\n")
    if start < 0:
        return text.rstrip("\n") + f"\n\n{heading}\n{block}"
    end = text.find("\n## ", start + len(heading) + 2)
    if end < 0:
        return text.rstrip("\n") + "\n" + block
    return text[:end].rstrip("\n") + "\n" + block + text[end:]


def append_block(path: str | os.PathLike, heading: str, block: str) -> None:
    """Insert `block` into `heading`'s section of the file at `path` (created if missing), atomically."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(insert_in_section(text, heading, block))
    os.replace(tmp, path)


def add_benchmarks_option(parser: argparse.ArgumentParser, default: str | os.PathLike) -> None:
    """`--benchmarks PATH`, the file `--record` appends to. The default is relative to the current directory (the
    tools run from the repository root): an installed module has no source tree to find it in."""
    parser.add_argument("--benchmarks", type=Path, default=default, metavar="PATH",
                        help="the BENCHMARKS.md that --record appends to (default: %(default)s)")
