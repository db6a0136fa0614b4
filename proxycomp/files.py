"""Files that are never seen half-written: each is written beside its target, then renamed onto it.

A crash, a kill or a full disk mid-write leaves the previous file (or none), never a truncated one; a full disk
or a file-size limit is reported as such (`DiskFullError`), since the libraries' own errors rarely say so.
"""
from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from proxycomp.errors import UserError

# What each errno that means "no room for this file" is called in our one line.
NO_ROOM = {errno.ENOSPC: "no space left on device", errno.EFBIG: "the file-size limit (ulimit -f) was reached",
           errno.EDQUOT: "the disk quota is used up"}


class DiskFullError(UserError):
    """No space left for a file; the previous version of it is intact."""


def no_room(err: BaseException) -> OSError | None:
    """The OSError saying there was no room for a write, found in `err` or in what it was raised from or during:
    torch's zip writer, for one, replaces the OSError of a failed write with a RuntimeError of its own."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in NO_ROOM:
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def no_room_message(err: OSError, path: str | os.PathLike | None = None) -> str:
    path = path or err.filename
    return f"{NO_ROOM[err.errno]}{f' for {path}' if path else ''}; make room and run again"


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
    except Exception as err:
        full = no_room(err)
        if full is None:
            raise
        raise DiskFullError(f"{no_room_message(full, path)} (the previous {path.name}, if any, is intact)") from err
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
