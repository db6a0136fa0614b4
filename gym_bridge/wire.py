"""What crosses between gym processes: one JSON message per datagram, tensors as raw bytes in a memfd.

The judge and a candidate process talk over a Unix SOCK_SEQPACKET pair: every send is one message (no framing to
forge), bounded in size, and may carry one file descriptor (SCM_RIGHTS): an anonymous in-memory file (memfd) holding
the message's tensors end to end. JSON, never pickle, so a message can only ever be data. The receiver checks every
tensor's dtype, shape, offset and size against the file and its own byte budget before it maps anything, and copies
the bytes out into tensors of its own: nothing the sender keeps can change them afterwards.
"""
from __future__ import annotations

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
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64)}


class WireError(Exception):
    """A peer that closed, fell silent past its deadline, or sent something that is not a message."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


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


def _write(tensors: Sequence[torch.Tensor]) -> int | None:
    """A memfd holding the tensors' bytes end to end (contiguous, on the host), or None when there are none."""
    total = sum(t.numel() * t.element_size() for t in tensors)
    if not tensors:
        return None
    fd = os.memfd_create("gym-tensors", os.MFD_CLOEXEC)
    os.ftruncate(fd, max(total, 1))
    if total:
        with mmap.mmap(fd, total) as mm:
            offset = 0
            for t in tensors:
                n = t.numel() * t.element_size()
                if n:
                    flat = t.contiguous().reshape(-1).cpu()
                    torch.frombuffer(mm, dtype=flat.dtype, count=flat.numel(), offset=offset).copy_(flat)
                    del flat
                offset += n
    return fd


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
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if not isinstance(offset, int) or offset < 0 or offset + nbytes > size:
            raise WireError("a tensor lies outside its memory file")
        specs.append((dtype, shape, offset, nbytes))
    total = sum(s[3] for s in specs if s)
    if total > max_bytes:
        raise WireError(f"{total} tensor bytes, more than the {max_bytes} expected")
    out: list[Any] = []
    mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE) if fd is not None and size else None
    try:
        for item, spec in zip(items, specs):
            if spec is None:
                out.append(item["value"])
                continue
            dtype, shape, offset, nbytes = spec
            count = nbytes // torch.empty((), dtype=dtype).element_size()
            flat = torch.frombuffer(mm, dtype=dtype, count=count, offset=offset) if count else torch.empty(0, dtype=dtype)
            out.append(flat.reshape(shape).to(device, copy=True))
            del flat
    finally:
        if mm is not None:
            mm.close()
    return out


# ---- messages ----------------------------------------------------------------------------------------------------
def send(sock: socket.socket, msg: dict, tensors: Sequence[torch.Tensor] = ()) -> None:
    data = json.dumps(msg, allow_nan=False).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"message of {len(data)} bytes")
    fd = _write(tensors)
    try:
        socket.send_fds(sock, [data], [fd] if fd is not None else [])
    finally:
        if fd is not None:
            os.close(fd)


def recv(sock: socket.socket, deadline: float) -> tuple[dict, int | None]:
    """The next message and its memfd (the caller closes it); WireError on EOF, a timeout or a malformed message."""
    wait = None if deadline == float("inf") else deadline - time.monotonic()
    if wait is not None and (wait <= 0 or not select.select([sock], [], [], wait)[0]):
        raise WireError("timeout")
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE + 1, 1)
    except OSError as err:
        raise WireError(f"connection lost ({err.strerror})") from None
    fd = fds[0] if fds else None
    if not data:
        raise WireError("closed")
    try:
        if len(data) > MAX_MESSAGE or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise WireError("oversized message")
        msg = json.loads(data)
        if not isinstance(msg, dict):
            raise WireError("a message must be an object")
    except (WireError, ValueError) as err:
        if fd is not None:
            os.close(fd)
        raise WireError(f"not a message ({err})") from None
    return msg, fd
