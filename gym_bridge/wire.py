"""What crosses between gym processes: one JSON message per datagram, tensors as raw bytes in memfds.

Gym processes talk over Unix SOCK_SEQPACKET pairs: every send is one message (no framing to forge), bounded in size,
and may carry file descriptors (SCM_RIGHTS). Tensors travel end to end in an anonymous in-memory file (memfd). JSON,
never pickle, so a message can only ever be data.

Every memfd is made by the judge, never by a candidate process: for an answer that holds tensors the judge hands over
a reply buffer of the size it will accept (`reply_buffer`), sealed so that it can neither grow nor shrink (inputs do
not travel: both sides draw them from the seed the judge reveals).
A candidate process only writes into the buffer it was given (`write_into`), so its own file-size limit never caps an
honest output, and nothing it sends can be larger than the judge asked for. The receiver checks every tensor's dtype,
shape, offset and size against the file and its own byte budget before it maps anything, and copies the bytes out
into tensors of its own.
"""
from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import select
import socket
import time
from collections.abc import Sequence
from typing import Any

import torch

MAX_MESSAGE = 1 << 18  # JSON bytes per message; error texts are cut well below it
MAX_FDS = 2
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64)}
_SEALS = fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


class WireError(Exception):
    """A peer that closed, fell silent past its deadline, or sent something that is not a message."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def nbytes(values: Sequence[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


# ---- values <-> (JSON, bytes) ---------------------------------------------------------------------------------
def _is_plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))


def encode(values: Sequence[Any]) -> tuple[list[dict], list[torch.Tensor]]:
    """Describe `values` (tensors and plain JSON values) as JSON items and the tensors to ship, in order."""
    items, tensors, offset = [], [], 0
    for value in values:
        if isinstance(value, torch.Tensor):
            t = value.detach()
            items.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": offset})
            tensors.append(t)
            offset += t.numel() * t.element_size()
        elif _is_plain(value):
            items.append({"value": value})
        else:
            raise TypeError(f"cannot send a {type(value).__name__}: only tensors and plain values cross")
    return items, tensors


def _fill(fd: int, tensors: Sequence[torch.Tensor]) -> None:
    total = nbytes(tensors)
    if not total:
        return
    with mmap.mmap(fd, total) as mm:
        offset = 0
        for t in tensors:
            n = t.numel() * t.element_size()
            if n:  # straight from the tensor's device into the shared pages: one copy
                view = torch.frombuffer(mm, dtype=t.dtype, count=t.numel(), offset=offset)
                view.copy_(t.contiguous().reshape(-1))
                del view
            offset += n


def reply_buffer(size: int) -> int:
    """A memfd of `size` bytes (at least 1) that nobody can resize: the most a peer may answer with."""
    fd = os.memfd_create("gym-reply", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, max(size, 1))
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    return fd


def write_into(fd: int | None, values: Sequence[Any]) -> list[dict]:
    """Write `values` into the reply buffer `fd` the judge handed over; their JSON description. WireError when they
    do not fit (the judge sized the buffer from what an honest answer needs)."""
    items, tensors = encode(values)
    total = nbytes(tensors)
    size = os.fstat(fd).st_size if fd is not None else 0
    if total > size:
        raise WireError(f"the outputs hold {total} bytes, more than the {size} the judge accepts")
    if total:
        _fill(fd, tensors)
    return items


def decode(items: Any, fd: int | None, max_bytes: int, device: str = "cpu") -> list[Any]:
    """The values `items` describe, tensors read from `fd`; WireError for anything malformed or over `max_bytes`."""
    if not isinstance(items, list):
        raise WireError("values must be a list")
    size = os.fstat(fd).st_size if fd is not None else 0
    specs = []
    for item in items:
        if not isinstance(item, dict):
            raise WireError("a value must be an object")
        if "value" in item:
            if not _is_plain(item["value"]):
                raise WireError("a plain value must be JSON")
            specs.append(None)
            continue
        dtype, shape, offset = DTYPES.get(item.get("dtype")), item.get("shape"), item.get("offset")
        if dtype is None or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise WireError(f"bad tensor description {str(item)[:200]}")
        size_of = torch.empty((), dtype=dtype).element_size()
        count = math.prod(shape)
        if not isinstance(offset, int) or offset < 0 or offset % size_of or offset + count * size_of > size:
            raise WireError("a tensor lies outside its memory file")
        specs.append((dtype, shape, offset, count))
    total = sum(s[3] * torch.empty((), dtype=s[0]).element_size() for s in specs if s)
    if total > max_bytes:
        raise WireError(f"{total} tensor bytes, more than the {max_bytes} expected")
    out: list[Any] = []
    mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE) if fd is not None and size else None
    try:
        for item, spec in zip(items, specs):
            if spec is None:
                out.append(item["value"])
                continue
            dtype, shape, offset, count = spec
            flat = (torch.frombuffer(mm, dtype=dtype, count=count, offset=offset) if count
                    else torch.empty(0, dtype=dtype))
            out.append(flat.reshape(shape).to(device, copy=True))
            del flat
    finally:
        if mm is not None:
            mm.close()
    return out


# ---- messages ----------------------------------------------------------------------------------------------------
def send(sock: socket.socket, msg: dict, fds: Sequence[int] = ()) -> None:
    data = json.dumps(msg, allow_nan=False).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"message of {len(data)} bytes")
    socket.send_fds(sock, [data], list(fds))


def recv(sock: socket.socket, deadline: float) -> tuple[dict, list[int]]:
    """The next message and the descriptors it carried (the caller closes them); WireError on EOF, a timeout or a
    malformed message."""
    wait = None if deadline == float("inf") else deadline - time.monotonic()
    if wait is not None and (wait <= 0 or not select.select([sock], [], [], wait)[0]):
        raise WireError("timeout")
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE + 1, MAX_FDS)
    except OSError as err:
        raise WireError(f"connection lost ({err.strerror})") from None
    try:
        if not data:
            raise WireError("closed")
        if len(data) > MAX_MESSAGE or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise WireError("not a message (oversized)")
        msg = json.loads(data)
        if not isinstance(msg, dict):
            raise WireError("not a message (not an object)")
    except (WireError, ValueError) as err:
        close(fds)
        raise WireError(str(err) if isinstance(err, WireError) else f"not a message ({err})") from None
    return msg, fds


def close(fds: Sequence[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)
