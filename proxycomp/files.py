"""Files that are never seen half-written: each is written beside its target, then renamed onto it.

A crash, a kill or a full disk mid-write leaves the previous file (or none), never a truncated one.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed onto `path` when the block ends without error,
    removed otherwise. Its parent folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
