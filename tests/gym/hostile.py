"""Hostile candidates, by threat class: each tries to forge a verdict, escape, poison a later candidate or hide its
compute. Every one must score 0, and the honest candidate judged after it must keep its verdict (test_hostile.py).

`JUDGE_ALONE` (True unless noted) means the judge catches it with the static checks switched off: only the
out-of-process judge, the OS containment and the instruments of the candidate process stand. False means that on
the CPU only the static checks stand in its way (the reason is given): a GPU would see it in the profile.
"""
from __future__ import annotations

from dataclasses import dataclass

RELU = '''\
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def triton_relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def token(x):
    """A real but useless launch, so the decoy check sees Triton."""
    return triton_relu(x.reshape(-1)[:1].contiguous())
'''


@dataclass(frozen=True)
class Hostile:
    name: str
    threat: str  # the class of the catalogue
    body: str  # appended to RELU
    judge_alone: bool = True
    why_static: str = ""  # when judge_alone is False: why only the static checks catch it on a CPU

    @property
    def code(self) -> str:
        return RELU + "\n" + self.body


HOSTILE = [
    # ---- checker patching: the comparison and the verdict are in another process ------------------------------
    Hostile("checker_function_mode", "checker patching", '''
def _fake(self, func, types, args=(), kwargs=None):
    if func in (torch.isclose, torch.allclose, torch.equal):
        return True if func is not torch.isclose else torch.ones_like(args[0], dtype=torch.bool)
    return func(*args, **(kwargs or {}))


Mode = type("Mode", (torch.overrides.TorchFunctionMode,), {"__torch_function__": _fake})
Mode().__enter__()


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return torch.zeros_like(x)
'''),
    Hostile("checker_tensor_bool", "checker patching", '''
torch.Tensor.__bool__ = lambda self: True


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return x.clone()
'''),
    Hostile("checker_alias_isclose", "checker patching", '''
t = torch
t.isclose = lambda a, b, **kw: torch.ones_like(a, dtype=torch.bool)
t.allclose = lambda *a, **kw: True


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return torch.empty_like(x)
'''),
    Hostile("checker_replace_harness", "checker patching", '''
import sys

harness = sys.modules["proxycomp.gym_bridge.candidate"]
harness.HANDLERS["call"] = lambda session, msg, fd: ({"launches": ["relu_kernel"], "types": ["torch.Tensor"],
                                                      "outputs": [], "ops": {}, "audit_ops": []}, [])


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''),
    Hostile("checker_torch_sys_modules", "checker patching", '''
wire = torch.sys.modules["proxycomp.gym_bridge.wire"]
wire.decode = lambda items, fd, max_bytes, device="cpu": [torch.zeros(4, 64)]


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return torch.zeros_like(x)
'''),
    Hostile("checker_forged_launches", "checker patching", '''
import sys

harness = sys.modules["proxycomp.gym_bridge.candidate"]
real = harness._summarize
harness._summarize = lambda prof, launched: {**real(prof, launched), "launches": ["relu_kernel"], "ops": {}}


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
''', judge_alone=False, why_static="it rewrites what its own process reports, and on a CPU nothing outside the process "
                                   "sees a Triton launch; on a GPU the profile shows no Triton kernel time"),
    # ---- cross-candidate poisoning: each candidate has a fresh process, and leaving state behind is a verdict ----
    Hostile("poison_default_dtype", "cross-candidate poisoning", '''
torch.set_default_dtype(torch.float64)


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("poison_mode_left_active", "cross-candidate poisoning", '''
class Always(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


Always().__enter__()


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("poison_environment", "cross-candidate poisoning", '''
import os

os.environ["TRITON_INTERPRET"] = "0"
os.environ["CUDA_VISIBLE_DEVICES"] = ""


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("poison_shm_answers", "cross-candidate poisoning", '''
class ModelNew(nn.Module):
    def forward(self, x):
        out = triton_relu(x)
        torch.save(out, "/dev/shm/proxycomp_gym_answers.pt")
        return out
'''),
    Hostile("poison_faulthandler_watchdog", "cross-candidate poisoning", '''
import faulthandler

faulthandler.dump_traceback_later(30, exit=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
''', judge_alone=False, why_static="a watchdog in a process that is discarded after its candidate harms nobody; "
                                   "the static check refuses faulthandler"),
    Hostile("poison_site_packages", "cross-candidate poisoning", '''
import site

path = site.getsitepackages()[0] + "/proxycomp_poison.pth"


class ModelNew(nn.Module):
    def forward(self, x):
        with open(path, "w") as fh:
            fh.write("import os; os.environ['POISONED'] = '1'\\n")
        return triton_relu(x)
'''),
    Hostile("poison_triton_base_cache", "cross-candidate poisoning", '''
import os

base = os.path.join(os.path.dirname(os.path.dirname(os.environ["TRITON_CACHE_DIR"])), "triton_base", "poison")


class ModelNew(nn.Module):
    def forward(self, x):
        os.makedirs(base, exist_ok=True)
        return triton_relu(x)
'''),
    # ---- precomputation: the judge draws every input from a secret seed, per evaluation --------------------------
    Hostile("precompute_fixed_seed_table", "precomputation", '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = []
        for trial in range(4):  # the old fixed seeds: 1234 + 1 + trial
            torch.manual_seed(1234 + 1 + trial)
            self.table.append(torch.relu(torch.randn(4, 64)))
        self.calls = 0

    def forward(self, x):
        token(x)
        out = self.table[self.calls % len(self.table)]
        self.calls += 1
        return out.to(x.device)
'''),
    Hostile("precompute_guess_next_draw", "precomputation", '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.guess = torch.relu(torch.randn(4, 64))  # the generator continues from the initialization seed

    def forward(self, x):
        token(x)
        return self.guess.to(x.device)
'''),
    Hostile("precompute_shape_cache", "precomputation", '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = tuple(x.shape)
        if key not in self.cache:
            self.cache[key] = triton_relu(x)
        token(x)
        return self.cache[key]
'''),
    Hostile("precompute_seed_hook", "precomputation", '''
seeds = []
real_seed = torch.manual_seed
torch.manual_seed = lambda s: (seeds.append(s), real_seed(s))[1]


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return torch.zeros_like(x)
'''),
    # ---- hiding compute from the audit -------------------------------------------------------------------------
    Hostile("hide_dispatch_modes_off", "hiding compute", '''
from torch.utils._python_dispatch import _disable_current_modes


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        with _disable_current_modes():
            return torch.relu(x)
'''),
    Hostile("hide_on_a_thread", "hiding compute", '''
import threading


class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        box = []
        worker = threading.Thread(target=lambda: box.append(torch.relu(x)))
        worker.start()
        worker.join()
        return box[0]
'''),
    Hostile("hide_jit_fork", "hiding compute", '''
class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        return torch.jit.wait(torch.jit.fork(torch.relu, x))
''', judge_alone=False, why_static="torch.jit.fork carries the profiler and the dispatch audit to its thread, so the "
                                   "compute is not hidden: alone it is a partial kernel, legal on a CPU (no coverage "
                                   "there) and scored by its coverage on a GPU"),
    Hostile("hide_numpy", "hiding compute", '''
class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        host = x.detach().cpu().numpy()
        return torch.from_numpy(host * (host > 0)).to(x.device)
''', judge_alone=False, why_static="numpy on the host is invisible to torch's dispatcher and profiler on a CPU; "
                                   "on a GPU the copies show and the Triton share is a token's"),
    Hostile("hide_phase_by_call_count", "hiding compute", '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 3:  # the correctness trials, it hopes
            return triton_relu(x)
        return torch.relu(x)
'''),
    Hostile("hide_phase_by_profiler", "hiding compute", '''
from torch.autograd.profiler import _is_profiler_enabled


class ModelNew(nn.Module):
    def forward(self, x):
        if _is_profiler_enabled:
            return triton_relu(x)
        return torch.relu(x)
''', judge_alone=False, why_static="every call the judge asks for is profiled, so this one behaves honestly where "
                                   "it is measured; only the private API it reads is refused"),
    # ---- escapes: file access, processes, resources ------------------------------------------------------------
    Hostile("escape_read_via_torch_load", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        torch.load("/etc/passwd", weights_only=False)
        return triton_relu(x)
'''),
    Hostile("escape_write_via_torch_save", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        torch.save(x, "/tmp/proxycomp_gym_escape.pt")
        return triton_relu(x)
'''),
    Hostile("escape_read_shm_cache", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.load("/dev/shm/proxycomp_gym_answers.pt")
'''),
    Hostile("escape_list_root_home", "escapes", '''
import os


class ModelNew(nn.Module):
    def forward(self, x):
        os.listdir("/root")
        return triton_relu(x)
'''),
    Hostile("escape_network", "escapes", '''
import socket


class ModelNew(nn.Module):
    def forward(self, x):
        socket.create_connection(("127.0.0.1", 22), timeout=1)
        return triton_relu(x)
'''),
    Hostile("escape_fork_daemon", "escapes", '''
import os


class ModelNew(nn.Module):
    def forward(self, x):
        if os.fork() == 0:
            os.setsid()
            while True:
                pass
        return triton_relu(x)
'''),
    Hostile("escape_kill_parent", "escapes", '''
import os
import signal


class ModelNew(nn.Module):
    def forward(self, x):
        os.kill(os.getppid(), signal.SIGKILL)
        return triton_relu(x)
'''),
    Hostile("escape_memory_bomb", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        hoard = torch.ones(40 * 2**30, dtype=torch.uint8)
        return triton_relu(x) + hoard[0]
'''),
    Hostile("escape_huge_stdout", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        line = "x" * (1 << 20)
        for _ in range(200):
            print(line)
        return triton_relu(x)
'''),
    Hostile("escape_huge_exception", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("x" * (100 << 20))
'''),
    Hostile("escape_huge_output", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x).repeat(2000, 1)
'''),
    Hostile("escape_cpu_burn", "escapes", '''
class ModelNew(nn.Module):
    def forward(self, x):
        n = 0
        while True:
            n += 1
'''),
    Hostile("escape_proc_of_others", "escapes", '''
import os


class ModelNew(nn.Module):
    def forward(self, x):
        seen = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    seen.append(pid + ":" + fh.read().replace(bytes(1), b" ").decode(errors="replace"))
        raise RuntimeError("processes I can see: " + " | ".join(seen))
'''),
    # ---- feedback: a NaN is not "max abs error 0" -----------------------------------------------------------------
    Hostile("feedback_nan_everywhere", "feedback bug", '''
class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x) * float("nan")
'''),
    Hostile("feedback_inf_in_places", "feedback bug", '''
class ModelNew(nn.Module):
    def forward(self, x):
        out = triton_relu(x)
        out[0, 0] = float("inf")
        return out
'''),
    # ---- timing: on a GPU the judge's clock checks the reported time; on a CPU a patched timer is still a verdict --
    Hostile("timing_alias_event", "timing forgery", '''
events = torch.cuda
events.Event = type("Event", (), {"__init__": lambda self, **kw: None, "record": lambda self, *a: None,
                                  "synchronize": lambda self: None, "elapsed_time": lambda self, end: 1e-4})


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("timing_alias_synchronize", "timing forgery", '''
cuda = torch.cuda
cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("timing_perf_counter", "timing forgery", '''
import time

clock = time
clock.perf_counter = lambda: 0.0
clock.monotonic = lambda: 0.0


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
    Hostile("timing_tf32_switch", "timing forgery", '''
backends = torch.backends
backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def forward(self, x):
        return triton_relu(x)
'''),
]

# A wrong candidate: right shapes and a real Triton launch, wrong values (the identity instead of ReLU).
WRONG = RELU + '''

class ModelNew(nn.Module):
    def forward(self, x):
        token(x)
        out = torch.empty_like(x)
        out.copy_(x)
        return out
'''

# Honest candidates that use what a kernel author may use: the standard library's code generators, a module not yet
# imported, torch.tensor(...) in forward, an autotuned kernel (GPU only: Triton's interpreter cannot autotune), a
# warning. Each must score like the plain honest one.
GPU_ONLY_VARIANTS = ("honest_autotuned",)
HONEST_VARIANTS = {
    "honest_dataclass_namedtuple": RELU + '''
import collections
import dataclasses
import fractions

Launch = collections.namedtuple("Launch", "block warps")


@dataclasses.dataclass
class Plan:
    block: int = 256
    scale: fractions.Fraction = fractions.Fraction(1, 1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.plan, self.launch = Plan(), Launch(256, 4)

    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), self.launch.block),)](x, out, x.numel(), BLOCK=self.launch.block)
        return out
''',
    "honest_tensor_from_values": RELU + '''
import warnings


class ModelNew(nn.Module):
    def forward(self, x):
        zero = torch.tensor([0.0], device=x.device)  # torch.tensor(...) dispatches lift_fresh_copy and detach_
        warnings.warn("a warning from a kernel is not a hack")
        out = triton_relu(x.contiguous())
        return out + zero[0] * 0
''',
    "honest_autotuned": '''
import torch
import triton
import triton.language as tl
from torch import nn


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 512})], key=["n"])
@triton.jit
def relu_tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out
''',
}
