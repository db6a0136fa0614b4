"""Process-level confinement of a worker: scrubbed environment, resource limits, and an audit hook.

The audit hook (PEP 578) cannot be removed once added. It refuses, for code attributed to the candidate,
process creation, loading native libraries, sockets, reading outside the interpreter's prefixes and the
worker's temp dir, and writing outside the temp dir; it also refuses the introspection that could reach
the harness' own state (gc object walks, frame access, tracing hooks). Every refusal is recorded so the
verdict names it. An event is attributed to the candidate unless the innermost frame from a trusted
library (torch, triton, numpy) sits closer to the event than the innermost candidate frame: Triton's
compiler legitimately runs ptxas and cc and loads the launcher it builds. Threat model: this stops
generic hacks; code written against this harness' internals can still e.g. call triton's build helpers
(documented residual risk).
"""
from __future__ import annotations

import os
import resource
import sys
import sysconfig

ENV_WHITELIST = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "LD_LIBRARY_PATH", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
                 "TRITON_PTXAS_PATH", "NVIDIA_VISIBLE_DEVICES", "CC")
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                  "pty.spawn", "os.startfile", "os.kill", "os.killpg"}
NATIVE_EVENTS = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function"}
NETWORK_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo"}
# object.__getattr__/__setattr__ fire only for guarded attributes (tb_frame, __code__, ...); setting plain
# class attributes is not audited, so patches of torch/time are caught by identity checks in the harness.
INTROSPECTION_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
                        "sys._current_frames", "sys.settrace", "sys.setprofile", "sys._getframemodulename",
                        "object.__getattr__", "object.__setattr__", "object.__delattr__"}
WRITE_EVENTS = {"os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.link",
                "os.symlink", "os.mkdir", "shutil.rmtree", "os.utime"}
READ_EVENTS = {"os.listdir", "os.scandir", "glob.glob"}


def scrubbed_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a worker: a whitelist of the parent's, HOME and caches inside the temp dir."""
    env = {k: os.environ[k] for k in ENV_WHITELIST if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, "triton_cache"),
               PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(extra or {})
    if "TRITON_INTERPRET" not in env and not _has_cuda():
        env["TRITON_INTERPRET"] = "1"  # no GPU here: candidates' kernels run in Triton's interpreter
    return env


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def apply_rlimits(*, memory_mb: int | None, cpu_s: int, max_files: int = 1024, max_file_mb: int = 512) -> None:
    """Limits for the current process. RLIMIT_AS only on CPU runs: CUDA reserves huge virtual ranges."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_mb << 20, max_file_mb << 20))
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    extend_cpu_budget(cpu_s)


def extend_cpu_budget(cpu_s: int) -> None:
    """RLIMIT_CPU counts the whole process life: give each new job `cpu_s` more seconds than used so far.
    Only the soft limit moves (SIGXCPU ends the worker); raising a hard limit needs CAP_SYS_RESOURCE,
    which containers often lack, so the hard one is left alone. The wall timeout is the real guard."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime) + 1 + cpu_s
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _real(path: object) -> str | None:
    if isinstance(path, int):  # an fd: already opened, nothing new is reached
        return None
    try:
        return os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def install_audit_hook(workdir: str, candidate_dir: str, trusted_libs: tuple[str, ...]) -> list[str]:
    """Install the (permanent) hook; returns the list it appends violation codes to.

    `candidate_dir` holds the candidate's module files (inside `workdir`); frames from there count as the
    candidate. `trusted_libs` are package directories whose own calls are allowed to spawn compilers and
    read system files.
    """
    violations: list[str] = []
    workdir = os.path.realpath(workdir)
    candidate_dir = os.path.realpath(candidate_dir)
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths()["stdlib"],
                sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # The harness' own modules: `warnings` and tracebacks read their lines while a candidate frame is live.
    here = os.path.dirname(os.path.realpath(__file__))
    harness_files = {os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")}
    read_roots = tuple(sorted({os.path.realpath(p) for p in prefixes} | harness_files
                              | {workdir, "/dev/null", "/dev/urandom"}))
    system_roots = ("/usr", "/lib", "/lib64", "/proc", "/sys", "/dev", "/etc", "/opt", "/run/nvidia")
    write_roots = (workdir, "/dev/null")
    library_write_roots = (workdir, "/dev/null", "/dev/nvidia", "/dev/shm")
    trusted = tuple(os.path.realpath(p) for p in trusted_libs)
    getframe = sys._getframe

    def attributed_to_candidate() -> bool:
        frame = getframe(3)
        while frame is not None:
            fname = frame.f_code.co_filename
            if fname.startswith(candidate_dir):
                return True
            if fname.startswith(trusted):
                return False
            frame = frame.f_back
        return False

    def refuse(code: str) -> None:
        if code not in violations:
            violations.append(code)
        raise PermissionError(f"gym sandbox: {code} is not allowed")

    busy = [False]  # the hook's own sys._getframe and f_back raise audit events too

    def hook(event: str, args: tuple) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            check(event, args)
        finally:
            busy[0] = False

    def check(event: str, args: tuple) -> None:
        if event in PROCESS_EVENTS:
            if attributed_to_candidate():
                refuse(f"process_spawn:{event}")
        elif event in NETWORK_EVENTS:
            refuse(f"network:{event}")
        elif event in NATIVE_EVENTS:
            if event == "ctypes.dlopen" and attributed_to_candidate():
                refuse(f"native_code:{event}")
        elif event in INTROSPECTION_EVENTS:
            if attributed_to_candidate():
                detail = f"{event}({args[1]})" if event.startswith("object.") else event
                refuse(f"introspection:{detail}")
        elif event == "open":
            path = _real(args[0])
            if path is None:
                return
            mode, flags = args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            mine = attributed_to_candidate()
            if writing:
                if not _under(path, write_roots if mine else library_write_roots):
                    refuse(f"file_write:{path}")
            elif not _under(path, read_roots if mine else read_roots + system_roots):
                refuse(f"file_read:{path}")
        elif event in WRITE_EVENTS:
            if event == "os.mkdir" and os.path.isdir(args[0]):
                return  # makedirs(exist_ok=True) of an existing dir (e.g. a library's cache root) changes nothing
            for target in args[:2]:
                path = _real(target) if isinstance(target, (str, bytes, os.PathLike)) else None
                if path and not _under(path, write_roots):
                    refuse(f"file_write:{path}")
        elif event in READ_EVENTS and attributed_to_candidate():
            path = _real(args[0]) if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
            if path and not _under(path, read_roots):
                refuse(f"file_read:{path}")

    sys.addaudithook(hook)
    return violations
