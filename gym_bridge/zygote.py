"""Fork server for workers: `python -I -m proxycomp.gym_bridge.zygote CTRL_FD`.

Importing torch (with torch._dynamo, which the op audit pulls in) costs seconds of CPU; the pool retires
a worker after every unclean candidate, so paying that per worker dominated a hostile batch. The zygote
imports everything once, never initialises CUDA, and forks per request:

    zygote ─fork→ monitor (new session) ─fork→ worker
                    └ reports {"pid"} then {"exit": code} of the worker on the status pipe

The parent sends each request over a Unix socket with the worker's three pipe ends attached
(SCM_RIGHTS). The monitor exists so the parent learns the worker's exit code or signal; killing the
session (monitor and worker) is how the parent enforces a timeout.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys

MAX_REQUEST = 1 << 16


def _monitor(req: dict, to_child_r: int, from_child_w: int, status_w: int) -> None:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.close(status_w)
        os.chdir(req["workdir"])
        os.environ.clear()
        os.environ.update(req["env"])
        from .worker import serve

        code = 0
        try:
            serve(to_child_r, from_child_w, req["workdir"], req["memory_mb"], req["cpu_s"], req.get("timing_lock"))
        except BaseException:  # noqa: BLE001 - reported through the exit code and worker.log
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(to_child_r)
    os.close(from_child_w)
    os.write(status_w, (json.dumps({"pid": pid, "pgid": os.getpid()}) + "\n").encode())
    _, status = os.waitpid(pid, 0)
    os.write(status_w, (json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n").encode())
    os._exit(0)


def main(argv: list[str]) -> int:
    ctrl = socket.socket(fileno=int(argv[0]))
    import numpy  # noqa: F401 - everything a worker imports, loaded once here
    import torch
    import torch._dynamo  # noqa: F401 - rebinds torch.manual_seed; import before workers save references
    import torch.profiler  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from . import harness, launch_hook, sandbox, timing, worker  # noqa: F401

    assert not torch.cuda.is_initialized(), "the zygote must not initialise CUDA: forked children could not use it"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped automatically
    ctrl.sendall(b"ready\n")
    while True:
        msg, fds, _, _ = socket.recv_fds(ctrl, MAX_REQUEST, 3)
        if not msg:
            return 0
        if os.fork() == 0:
            try:
                ctrl.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _monitor(json.loads(msg), *fds)
            finally:
                os._exit(1)  # never fall back into the zygote's loop
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
