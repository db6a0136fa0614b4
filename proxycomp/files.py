"""Files that are never seen half-written: each is written beside its target, then renamed onto it.

A crash, a kill or a full disk mid-write leaves the previous file (or none), never a truncated one; a full disk
is reported as such (`DiskFullError`), since the libraries' own errors rarely say so.
"""
from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from proxycomp.errors import UserError


class DiskFullError(UserError):
    """No space left for a file; the previous version of it is intact."""


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
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        raise DiskFullError(f"no space left on device for {path}; free some and run again (the previous "
                            f"{path.name}, if any, is intact)") from err
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
