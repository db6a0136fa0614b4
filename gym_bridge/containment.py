"""OS-level containment of a candidate process, applied by trusted code before the candidate's module loads.

Each layer is the kernel's, so nothing the candidate runs (Python, a Triton helper that spawns a compiler, a child
it forks) can lift it:
- its own PID, mount, network and IPC namespaces where the kernel allows them: the candidate is PID 1 of a namespace
  with a /proc of its own, so every thread and process it makes (setsid children included) dies when it does, it
  sees and names no process outside (not even their command lines), and it has no network. Where namespaces are
  refused, its monitor is a child subreaper that kills every descendant left behind, and the audit hook refuses
  other processes' /proc entries.
- Landlock (Linux >= 5.13): reads only the read-only installs (the interpreter, its packages, system libraries,
  /proc, /sys), writes only its own temporary folder and the GPU device files; no TCP; no signals or abstract
  sockets beyond its own domain (ABI 6).
- seccomp: no new thread (clone with CLONE_THREAD is refused, clone3 reports ENOSYS so the C library falls back to
  clone): compute cannot move to a thread that no instrument of the process watches. Processes (the Triton
  compiler's) may still start; they are held by the layers above.
- no capabilities and no_new_privs: it keeps uid 0 where the gym runs as root (system folders may be unreadable to
  other users), but without any privilege, and no execve can give one back.
- resource limits: address space (CPU runs) or data segment (CUDA reserves large virtual ranges), CPU time, open
  files, file size, processes, no core dumps.
`contain` reports which layers took effect, so a verdict says how far the candidate was held.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import sys
import sysconfig

ENV_WHITELIST = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "LD_LIBRARY_PATH", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
                 "TRITON_PTXAS_PATH", "NVIDIA_VISIBLE_DEVICES", "CC")
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_SECCOMP = 1, 38, 24, 36, 22
_SYS_CAPSET, _SYS_LANDLOCK_CREATE, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT = 126, 444, 445, 446

# Landlock filesystem rights (include/uapi/linux/landlock.h) and the ABI that introduced each group.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_MAKE_ALL = sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

_libc = ctypes.CDLL(None, use_errno=True)


def scrubbed_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a gym process: a whitelist of the parent's, HOME and caches inside its own folder."""
    env = {k: os.environ[k] for k in ENV_WHITELIST if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, "triton_cache"),
               PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               KINETO_LOG_LEVEL="5")  # the profiler's start/stop lines would bury a crash's own output
    env.update(extra or {})
    return env


def _call(fn, *args) -> int:
    """A libc call; -errno on failure (never raises: a refused layer is reported, not fatal)."""
    result = fn(*args)
    return result if result >= 0 else -ctypes.get_errno()


def enter_namespaces() -> list[str]:
    """Unshare namespaces for the children this process forks next (needs CAP_SYS_ADMIN): network and IPC, then PID
    and mount together, so that the next child is PID 1 of its own PID namespace and can mount a /proc of its own
    (`own_proc`): it then sees no process outside, and CUDA starts there (in a PID namespace that still shows the
    host's /proc, the driver fails with error 304). Without them this process becomes a child subreaper instead, so
    orphaned descendants come back to it to be killed. Returns the layers in force."""
    layers = []
    if _call(_libc.unshare, CLONE_NEWNET | CLONE_NEWIPC) == 0:
        layers.append("net-ipc-namespaces")
    if _call(_libc.unshare, CLONE_NEWPID | CLONE_NEWNS) == 0:
        return layers + ["pid-namespace"]
    _call(_libc.prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return layers + ["subreaper"]


def own_proc() -> bool:
    """Mount a /proc of this PID namespace over the host's (in this process's own mount namespace, made private
    first so nothing propagates back): called by PID 1 of the namespace before anything reads /proc."""
    if _call(_libc.mount, None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        return False
    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return _call(_libc.mount, b"proc", b"/proc", b"proc", flags, None) == 0


def kill_descendants() -> None:
    """SIGKILL every process this (subreaper) process still has below it, until none is left."""
    while True:
        children = _children(os.getpid())
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in children:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(p) for p in fh.read().split()]
        except OSError:
            pass
    return found


def die_with_parent() -> None:
    _call(_libc.prctl, PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def apply_rlimits(*, memory_mb: int | None, cuda: bool, cpu_s: int, max_files: int = 1024,
                  max_file_mb: int = 64, max_procs: int = 512) -> None:
    """Limits of the current process. Memory: the address space on CPU runs; with CUDA, whose driver reserves
    terabytes of virtual addresses, the data segment (private writable memory) instead."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max_files, max_files))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_mb << 20, max_file_mb << 20))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
    if memory_mb:
        limit = resource.RLIMIT_DATA if cuda else resource.RLIMIT_AS
        resource.setrlimit(limit, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))


def read_only_roots() -> list[str]:
    """Folders a candidate may read and execute from: the interpreter, its packages (this one included) and the
    system's libraries, headers and compilers, /proc and /sys. /etc, /home, /root, /tmp and the rest are not."""
    paths = sysconfig.get_paths()
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"],
             "/usr", "/lib", "/lib64", "/bin", "/opt", "/proc", "/sys", "/etc/ld.so.cache"}
    # The gym's own folders, wherever an (editable) install put them: tracebacks read their source lines.
    roots.add(os.path.dirname(os.path.realpath(__file__)))
    roots.add(os.path.dirname(os.path.realpath(sys.modules["proxycomp"].__file__)))
    return sorted({os.path.realpath(r) for r in roots if os.path.exists(r)})


def _landlock_abi() -> int:
    return _call(_libc.syscall, _SYS_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(workdir: str, read_roots: list[str], device_files: list[str]) -> int:
    """Restrict this process and its future children to `read_roots` (read, execute), `workdir` (everything) and
    `device_files` (read, write, ioctl); no TCP, and (ABI >= 6) no signal or abstract socket outside the domain.
    Returns the Landlock ABI in force, 0 where the kernel has none."""
    abi = _landlock_abi()
    if abi < 1:
        return 0
    handled = READ | FS_WRITE_FILE | FS_MAKE_ALL
    handled |= (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (FS_IOCTL_DEV if abi >= 5 else 0)
    fields = [handled]
    if abi >= 4:
        fields.append(NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        fields.append(SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL)
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = _call(_libc.syscall, _SYS_LANDLOCK_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                    ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        rules = [(root, READ) for root in read_roots]
        rules += [(workdir, handled)]
        rules += [(dev, FS_READ_FILE | FS_WRITE_FILE | (FS_IOCTL_DEV if abi >= 5 else 0)) for dev in device_files]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):  # a file takes file rights only
                    access &= FS_EXECUTE | FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
                rule = _PathBeneath(access & handled, fd)
                if _call(_libc.syscall, _SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) < 0:
                    return 0
            finally:
                os.close(fd)
        if _call(_libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
            return 0
        if _call(_libc.syscall, _SYS_LANDLOCK_RESTRICT, ruleset, 0) < 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Empty the bounding, effective, permitted and inheritable capability sets, and set no_new_privs."""
    for cap in range(64):
        _call(_libc.prctl, PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: harmless
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    ok = _call(_libc.syscall, _SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)) == 0
    return _call(_libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and ok


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def forbid_threads() -> bool:
    """A seccomp filter (x86-64) that refuses new threads; False where it cannot be installed."""
    if platform.machine() != "x86_64":
        return False
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
    allow, refuse = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
    program = [
        (ld, 0, 0, 4),                         # 0: the syscall's architecture
        (jeq, 0, 5, 0xC000003E),               # 1: not x86-64: allow
        (ld, 0, 0, 0),                         # 2: the syscall number
        (jeq, 4, 0, 435),                      # 3: clone3: ENOSYS (the C library then uses clone)
        (jeq, 0, 2, 56),                       # 4: not clone: allow
        (ld, 0, 0, 16),                        # 5: clone's flags (low word)
        (jset, 2, 0, 0x00010000),              # 6: CLONE_THREAD: EPERM
        (ret, 0, 0, allow),                    # 7
        (ret, 0, 0, refuse | errno.ENOSYS),    # 8
        (ret, 0, 0, refuse | errno.EPERM),     # 9
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*row) for row in program])
    prog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    if _call(_libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        return False
    return _call(_libc.prctl, PR_SET_SECCOMP, 2, ctypes.byref(prog), 0, 0) == 0  # SECCOMP_MODE_FILTER


def device_files() -> list[str]:
    """The device files a candidate may open: the null/random ones and the GPU driver's."""
    names = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]
    names += sorted(os.path.join("/dev", n) for n in os.listdir("/dev") if n.startswith("nvidia"))
    if os.path.isdir("/dev/nvidia-caps"):
        names += sorted(os.path.join("/dev/nvidia-caps", n) for n in os.listdir("/dev/nvidia-caps"))
    return [n for n in names if os.path.exists(n)]


def contain(workdir: str, read_roots: list[str], devices: list[str], *, memory_mb: int | None, cuda: bool,
            cpu_s: int) -> list[str]:
    """Apply every layer to the current process (the candidate, before its code loads); the layers in force."""
    layers = []
    die_with_parent()
    apply_rlimits(memory_mb=memory_mb, cuda=cuda, cpu_s=cpu_s)
    layers.append("rlimits")
    abi = landlock(workdir, read_roots, devices)
    if abi:
        layers.append(f"landlock-abi{abi}")
    if drop_capabilities():
        layers.append("no-capabilities")
    if forbid_threads():
        layers.append("seccomp-no-threads")
    return layers


# ---- the audit hook: refusals inside the process, each reported as a verdict ---------------------------------------
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                  "pty.spawn", "os.startfile", "os.kill", "os.killpg"}
NETWORK_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo"}
# object.__getattr__/__setattr__ fire only for guarded attributes (tb_frame, __code__, ...).
INTROSPECTION_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
                        "sys._current_frames", "sys.settrace", "sys.setprofile", "sys._getframemodulename",
                        "object.__getattr__", "object.__setattr__", "object.__delattr__", "sys.addaudithook",
                        "cpython.PyInterpreterState_Clear"}
# Code that did not come from an installed file: compiled from a string, built, unmarshalled or unpickled.
DYNAMIC_CODE_EVENTS = {"compile", "exec", "code.__new__", "marshal.loads", "marshal.load", "pickle.find_class",
                       "function.__new__"}  # builtins.exec/eval raise "exec"; FunctionType(code) "function.__new__"
FRAME_READS = {"sys._getframe", "sys._getframemodulename", "object.__getattr__", "object.__setattr__",
               "object.__delattr__"}  # what a traceback or a warning does; the rest changes or walks the process
FOREIGN_CALL_EVENTS = {"ctypes.call_function", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
                       "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at", "ctypes.addressof"}
# The names a frame's own code uses when it asks for an operation itself (rather than calling what it was handed).
OPERATION_NAMES = {"compile": ("compile", "exec", "eval"), "exec": ("exec", "eval"), "gc.get_objects": ("get_objects",),
                   "gc.get_referrers": ("get_referrers",), "gc.get_referents": ("get_referents",),
                   "sys._getframe": ("_getframe",), "sys.settrace": ("settrace",), "sys.setprofile": ("setprofile",),
                   "sys.addaudithook": ("addaudithook",), "sys._current_frames": ("_current_frames",),
                   "code.__new__": ("CodeType", "replace"), "function.__new__": ("FunctionType",),
                   "marshal.loads": ("loads",)}
WRITE_EVENTS = {"os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.link",
                "os.symlink", "os.mkdir", "shutil.rmtree", "os.utime"}
READ_EVENTS = {"os.listdir", "os.scandir", "glob.glob"}
# The standard library's code generators (dataclass methods, namedtuple classes) compile templates of their own.
GENERATORS = ("dataclasses.py", "collections/__init__.py", "typing.py", "enum.py")
# Standard-library modules that run whatever source they are given: their frames count as the caller's own code.
SOURCE_RUNNERS = ("code.py", "codeop.py", "runpy.py", "timeit.py", "pdb.py", "bdb.py", "doctest.py", "cProfile.py",
                  "profile.py", "trace.py")


def _real(path: object) -> str | None:
    if isinstance(path, int):  # an fd: already opened, nothing new is reached
        return None
    try:
        return os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def reporter(fd: int):
    """The candidate process's one channel for what it refused or found changed: a line per verdict code on a pipe
    the judge reads. Append-only: a line written is out of the process, so no candidate can take it back; a closed
    pipe is itself a verdict (the judge sees its end early), and a pipe kept full ends the process."""
    write, exit_now = os.write, os._exit

    def report(code: str) -> None:
        line = code.replace("\n", " ")[:300] + "\n"
        try:
            write(fd, line.encode(errors="replace"))
        except OSError:
            exit_now(70)

    return report


def install_audit_hook(workdir: str, read_roots: list[str], devices: list[str], compiler_libs: tuple[str, ...],
                       libraries: tuple[str, ...], hidden: tuple[str, ...], report) -> None:
    """A permanent PEP 578 hook for this process; each refusal is `report`ed (reporter()) and raised.

    File access outside `workdir`, `read_roots` and `devices` is refused whoever asks (no library is exempt): the
    same line Landlock draws, kept where the kernel has no Landlock; so are other processes' /proc entries. Network
    use is refused. The rest depends on who asks, read from the Python stack: a frame of code that is not installed
    (the candidate's file, anything in its folder, code compiled from a string whatever file name it claims) is the
    candidate's; a frame of an exempt library is not; the rest (the standard library, the harness) is looked
    through. Process creation and native library loading are refused unless a frame of `compiler_libs` (Triton,
    which runs ptxas and a C compiler and loads what they build) is nearer than the candidate's, and also when no
    frame of either is on the stack (a C callable left behind to run later). Introspection that could reach the
    instruments (gc walks, frames, tracing hooks, audit hooks) is refused unless a frame of `libraries` (torch,
    Triton: their warnings and tracing read frames) or of the standard library's code generators is nearer; a
    library frame right at the operation decides only if its own code names the operation (a library that calls
    what it was handed, torch's pytree say, launders nothing); the standard library's source runners (code,
    runpy, timeit...) count as the candidate's own frames. Dynamic code (compile, exec of code that no installed
    file holds, code objects built or unmarshalled) is refused unless `libraries` or the standard library's code
    generators ask; importing an installed file compiles exactly that file's text (or loads its cached bytecode),
    and is allowed. Importing the packages named in `hidden` (the gym's own, which the harness took out of
    sys.modules) is refused: a name looked up from a string reaches no instrument.
    """
    workdir = os.path.realpath(workdir)
    write_roots = (workdir, *devices)
    read_roots = tuple(read_roots) + write_roots
    installed = tuple(r for r in read_roots if r not in write_roots and r not in ("/proc", "/sys"))
    compilers = tuple(os.path.realpath(p) for p in compiler_libs)
    trusted = tuple(os.path.realpath(p) for p in libraries)
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    generators = trusted + tuple(os.path.join(stdlib, g) for g in GENERATORS)
    runners = {os.path.join(stdlib, r) for r in SOURCE_RUNNERS}
    own_proc = os.path.realpath("/proc/self")
    getframe = sys._getframe
    files: dict[str, str] = {}  # co_filename -> "mine" | "looked through" | an exempt root, as first classified

    def kind(filename: str) -> str:
        if filename not in files:
            if filename.startswith("<frozen "):
                files[filename] = "through"
            else:
                path = os.path.realpath(filename) if os.path.isabs(filename) else ""
                files[filename] = path if path and _under(path, installed) and not _under(path, (workdir,)) \
                    and path not in runners else "mine"
        return files[filename]

    def attributed_to_candidate(exempt: tuple[str, ...], nobody: bool, names: tuple[str, ...] = ()) -> bool:
        """Whether the nearest frame that decides is the candidate's; `nobody`: the answer when none decides. A frame
        of an exempt library decides only if its own code names the operation (`names`, when given): one that
        merely calls a function it was handed (torch's pytree mapping `compile` over a tree, say) is looked
        through, so the candidate cannot launder an operation through a library's callback."""
        frame, direct = getframe(3), True  # direct: no standard-library helper between the operation and this frame
        while frame is not None:
            code = frame.f_code
            where = kind(code.co_filename)
            if where == "mine":
                return True
            if where == "through" or not _under(where, exempt):
                direct = False
            elif not (direct and names and not set(names) & set(code.co_names)):
                return False
            frame = frame.f_back
        return nobody

    def refuse(code: str) -> None:
        report(code)
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

    def other_process(path: str) -> bool:
        parts = path.split("/")
        return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and not _under(path, (own_proc,))

    def installed_source(source: object, filename: object) -> bool:
        """An import compiling an installed file: the text compiled is that file's own."""
        path = _real(filename) if isinstance(filename, (str, bytes)) else None
        if not path or not _under(path, installed) or _under(path, (workdir,)):
            return False
        try:
            with open(path, "rb") as fh:
                text = fh.read()
        except OSError:
            return False
        return text == (source.encode() if isinstance(source, str) else bytes(source))

    def cached_bytecode(data: object) -> bool:
        """An import loading an installed file's cached bytecode: importlib's caller names the .pyc, whose body
        (past its 16-byte header) is exactly these bytes."""
        frame = getframe(3)
        path = _real(frame.f_locals.get("bytecode_path")) if frame is not None and \
            frame.f_code.co_filename.startswith("<frozen importlib") else None
        if not path or not _under(path, installed) or _under(path, (workdir,)):
            return False
        try:
            with open(path, "rb") as fh:
                return fh.read()[16:] == bytes(data)
        except (OSError, TypeError):
            return False

    def check(event: str, args: tuple) -> None:
        if event == "open":
            path = _real(args[0])
            if path is None:
                return
            mode, flags = args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if writing and not _under(path, write_roots):
                refuse(f"file_write:{path}")
            if not writing and (not _under(path, read_roots) or other_process(path)):
                refuse(f"file_read:{path}")
        elif event in WRITE_EVENTS:
            if event == "os.mkdir" and os.path.isdir(args[0]):
                return  # makedirs(exist_ok=True) passing through an existing folder (a cache's root) changes nothing
            for target in args[:2]:
                path = _real(target) if isinstance(target, (str, bytes, os.PathLike)) else None
                if path and not _under(path, (workdir,)):
                    refuse(f"file_write:{path} ({event})")
        elif event in READ_EVENTS:
            path = _real(args[0]) if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
            if path and (not _under(path, read_roots) or other_process(path)):
                refuse(f"file_read:{path}")
        elif event in NETWORK_EVENTS:
            refuse(f"network:{event}")
        elif event in PROCESS_EVENTS:
            if attributed_to_candidate(compilers, nobody=True):
                refuse(f"process_spawn:{event}")
        elif event == "ctypes.dlopen":
            if attributed_to_candidate(compilers, nobody=True):
                refuse(f"native_code:{event}")
        elif event in FOREIGN_CALL_EVENTS:  # ctypes.pythonapi reaches frames and fork with no event of their own
            if attributed_to_candidate(trusted, nobody=False):
                refuse(f"native_code:{event}")
        elif event in INTROSPECTION_EVENTS:  # namedtuple reads its caller's module name from a frame
            if attributed_to_candidate(generators, nobody=event not in FRAME_READS,
                                       names=OPERATION_NAMES.get(event, ())):
                detail = f"{event}({args[1]})" if event.startswith("object.") else event
                refuse(f"introspection:{detail}")
        elif event == "import":
            if str(args[0]).split(".")[0] in hidden:
                refuse(f"introspection:import {args[0]}")
        elif event in DYNAMIC_CODE_EVENTS:
            if event == "compile" and installed_source(*args[:2]):
                return
            if event in ("marshal.loads", "marshal.load") and cached_bytecode(args[0]):
                return
            if event == "exec" and kind(getattr(args[0], "co_filename", "<unknown>")) not in ("mine", "through"):
                return  # an installed file's code: its text or bytecode was checked when it was loaded
            if attributed_to_candidate(generators, nobody=True, names=OPERATION_NAMES.get(event, ())):
                refuse(f"dynamic_code:{event}")

    sys.addaudithook(hook)
