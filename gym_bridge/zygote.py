"""Fork server of a pool: `python -I -B -m proxycomp.gym_bridge.zygote CTRL_FD`.

Importing torch and Triton costs seconds; a candidate gets a fresh process every time, so the zygote imports
everything once, never initialises CUDA, and forks on request:

    pool ──ctrl──▶ zygote ─fork→ judge                      (trusted: judges candidates, judge.serve)
    judge ─requests─▶ zygote ─fork→ monitor (new session, namespaces) ─fork→ candidate (contained, candidate.serve)

A judge gets its own request socket to the zygote when it is forked. A request carries its descriptors (SCM_RIGHTS):
for a judge, its socket to the pool; for a candidate, its socket to the judge, the status pipe the monitor reports
on ({"pid", "namespaces"}, then {"exit"}), the judge's lifeline (when the judge closes it, or dies, the monitor kills
the candidate) and the write end of the candidate's report pipe (containment.reporter). Every forked child closes
every descriptor but its own before anything else runs.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import sys

MAX_REQUEST = 1 << 16
GYM_PACKAGE = "proxycomp"  # what a candidate process hides from name lookups once its harness is loaded


def _keep_only(fds: list[int]) -> None:
    """Close every descriptor of this process except stdin/out/err and `fds`."""
    keep = sorted({0, 1, 2, *fds})
    low = 0
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _environment(req: dict) -> None:
    """This child's folder and environment; the temporary folder the zygote's tempfile cached is not its own."""
    import tempfile

    os.chdir(req["workdir"])
    os.environ.clear()
    os.environ.update(req["env"])
    tempfile.tempdir = None


def _run_judge(req: dict, pool_fd: int, zygote_fd: int, zygote_pid: int) -> None:
    from . import containment

    os.setsid()
    # The zygote exits when its pool closes or dies; a judge waiting on a hung candidate would otherwise outlive a
    # killed pool for the candidate's whole timeout, and its candidate with it (its monitor kills it when it goes).
    containment.die_with_parent()
    if os.getppid() != zygote_pid:  # the zygote was gone before the line above
        os._exit(1)
    _environment(req)
    from .judge import serve

    serve(socket.socket(fileno=pool_fd), socket.socket(fileno=zygote_fd), req)


def _run_candidate(req: dict, sock_fd: int, report_fd: int) -> None:
    """The candidate process: trusted set-up, containment, then the candidate's requests (candidate.serve)."""
    workdir = req["workdir"]
    _environment(req)
    log = os.open(os.path.join(workdir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if req.get("triton_base"):  # compiled helpers shared read-only by copy: a candidate can spoil only its own
        shutil.copytree(req["triton_base"], os.path.join(workdir, "triton_cache"), dirs_exist_ok=True)
    import torch
    import triton

    from . import candidate, containment, refusals

    cuda = req["device"] == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is fp32: a reference-precision comparison
    torch.backends.cudnn.allow_tf32 = False
    if cuda:
        torch.cuda.set_per_process_memory_fraction(req["gpu_fraction"])
    _warm_up(cuda, req.get("timing_lock"))  # before containment: the profiler and the driver start their threads now
    roots, devices = containment.read_only_roots(), containment.device_files()  # read while they can be
    layers = containment.contain(workdir, roots, devices, memory_mb=req["memory_mb"], cuda=cuda, cpu_s=req["cpu_s"])
    report = containment.reporter(report_fd)
    harness = candidate.hide(GYM_PACKAGE)
    refusals.refuse_operator_registration(containment.reporter(report_fd))  # reporters of their own (refusals.py)
    refusals.refuse_host_compute(containment.reporter(report_fd))
    libraries = tuple(os.path.dirname(m.__file__) for m in (torch, triton, candidate))
    containment.install_audit_hook(workdir, roots, devices, (os.path.dirname(triton.__file__),), libraries,
                                   (GYM_PACKAGE,), report)
    candidate.serve(socket.socket(fileno=sock_fd), workdir, req["device"], tuple(req["extra_allowed_ops"]),
                    containment.reporter(report_fd), layers + req["layers"], harness)


@contextlib.contextmanager
def _shared_turn(path: str | None):
    """The GPU's timing lock held shared (timing.DeviceLock), closed after: the candidate keeps no descriptor of it."""
    if path is None:
        yield
        return
    from .timing import DeviceLock

    lock = DeviceLock(path)
    try:
        with lock.share():
            yield
    finally:
        lock.close()


def _warm_up(cuda: bool, timing_lock: str | None) -> None:
    """Start the device, Triton's launcher and the profiler before the candidate: they start threads of their own,
    which the seccomp filter would refuse later, and which the judge's thread count takes as the baseline. A spare
    process starts while other candidates are timed: its one launch waits for the GPU's shared hold, the seconds of
    starting the driver and the profiler do not."""
    import torch
    import triton
    import triton.language as tl
    from torch.profiler import ProfilerActivity, profile

    @triton.jit
    def _fill(ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs, 1.0, mask=offs < n)

    buf = torch.empty(8, device="cuda" if cuda else "cpu")  # allocates, launches nothing
    if cuda:
        _fill.warmup(buf, 8, BLOCK=16, grid=(1,))  # compiled (Triton's cache holds it) and loaded, not launched
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])):
        with _shared_turn(timing_lock):  # None on the CPU: no GPU lock there
            _fill[(1,)](buf, 8, BLOCK=16)
            if cuda:
                torch.cuda.synchronize()


def _monitor(req: dict, sock_fd: int, status_w: int, lifeline_r: int, report_w: int) -> None:
    from . import containment

    os.setsid()
    namespaces = containment.enter_namespaces()
    pid_namespace = "pid-namespace" in namespaces
    pid = os.fork()
    if pid == 0:
        try:
            _keep_only([sock_fd, report_w])
            if pid_namespace and not containment.own_proc():  # CUDA would fail, and /proc would show the host's
                raise RuntimeError("could not mount a /proc of the candidate's own PID namespace")
            req["layers"] = namespaces + (["own-proc"] if pid_namespace else [])
            _run_candidate(req, sock_fd, report_w)
        except BaseException:  # noqa: BLE001 - reported through the exit code and output.log
            import traceback

            traceback.print_exc()
        finally:
            os._exit(1)
    os.close(sock_fd)
    os.close(report_w)
    os.write(status_w, (json.dumps({"pid": pid, "namespaces": namespaces}) + "\n").encode())
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd, lifeline_r], [], [])
    if lifeline_r in ready:  # the judge is done with it, or gone
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if not pid_namespace:  # a PID namespace dies with its first process; without one, kill what it left behind
        containment.kill_descendants()
    os.write(status_w, (json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n").encode())
    os._exit(0)


def _fork(target, *args) -> None:
    """Run `target(*args)` in a child that never comes back into the zygote's loop."""
    if os.fork() == 0:
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            target(*args)
            code = 0
        except BaseException:  # noqa: BLE001 - into the zygote's log (a candidate's goes to its own)
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)


def main(argv: list[str]) -> int:
    sys.dont_write_bytecode = True  # -I drops PYTHONDONTWRITEBYTECODE: no process here writes beside the installs
    ctrl = socket.socket(fileno=int(argv[0]))
    import numpy  # noqa: F401 - everything a judge and a candidate import, loaded once here
    import torch
    import torch._dynamo  # noqa: F401 - rebinds torch.manual_seed; import before anything saves references
    import torch.profiler  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from . import candidate, containment, integrity, judge, launch_hook, op_audit, refusals, wire  # noqa: F401

    assert not torch.cuda.is_initialized(), "the zygote must not initialise CUDA: forked children could not use it"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    ctrl.sendall(b"ready\n")
    clients: list[socket.socket] = []  # each judge's request socket
    zygote_pid = os.getpid()
    while True:
        ready, _, _ = select.select([ctrl, *clients], [], [])
        for sock in ready:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
            if not msg:
                if sock is ctrl:
                    return 0
                clients.remove(sock)
                sock.close()
                continue
            req = json.loads(msg)
            if sock is ctrl:  # a judge: its pool socket, and a new request socket to this zygote
                mine, theirs = socket.socketpair()
                _fork(lambda r=req, p=fds[0], z=theirs.fileno(): (_keep_only([p, z]), _run_judge(r, p, z, zygote_pid)))
                theirs.close()
                clients.append(mine)
            else:  # a candidate for this judge
                _fork(lambda r=req, f=fds: (_keep_only(list(f)), _monitor(r, *f)))
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
