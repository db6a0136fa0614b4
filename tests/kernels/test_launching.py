"""kernels.launching.Launcher: a call with a key seen before skips Triton's dispatch and launches the kernel Triton
built for that key; anything Triton specializes on that changes goes back through Triton.

CPU: a stand-in for a JIT kernel records which path each call took (the interpreter has no built kernels). GPU: the
attention's launches through Launcher equal Triton's own, bit for bit, and a misaligned view gets its own build.
"""
from __future__ import annotations

import pytest
import torch

from proxycomp.kernels import launching
from proxycomp.kernels.launching import Launcher, cdiv


class _Built:
    function, packed_metadata = "function", "metadata"

    def __init__(self, runs: list) -> None:
        self.runs = runs

    def launch_metadata(self, grid, stream, *values):
        return None

    def run(self, g0, g1, g2, stream, function, metadata, launch_metadata, enter, exit, *values):
        self.runs.append(((g0, g1, g2), stream, values, (launch_metadata, enter, exit)))


class _Kernel:
    """What Launcher needs of a JITFunction: arg_names, and kernel[grid](...) launching and returning a built kernel."""
    arg_names = ["X", "n", "scale", "BLOCK"]

    def __init__(self) -> None:
        self.triton_calls: list = []
        self.runs: list = []

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.triton_calls.append((grid, args, kwargs))
            return _Built(self.runs)
        return call


@pytest.fixture
def kernel(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(launching, "_current_stream", lambda device: 77)
    k = _Kernel()
    launcher = Launcher(k)
    assert not launcher.direct  # not a JITFunction: every call would go through Triton
    launcher.direct = True
    return k, launcher


def test_a_seen_key_launches_the_built_kernel_with_every_argument_in_order(kernel):
    k, launcher = kernel
    x = torch.randn(64)
    launcher[(3,)](x, 10, scale=0.5, BLOCK=16, num_warps=4)
    assert k.triton_calls == [((3,), (x, 10), dict(scale=0.5, BLOCK=16, num_warps=4))] and not k.runs
    launcher[(5, 2)](x, 10, scale=0.5, BLOCK=16, num_warps=4)
    assert len(k.triton_calls) == 1
    # The tensor as its address, and no hooks: triton's default chains are empty.
    assert k.runs == [((5, 2, 1), 77, (x.data_ptr(), 10, 0.5, 16), (None, None, None))]


def test_a_tensor_subclass_launches_as_itself(kernel):
    """Only a plain tensor goes as its address; a Parameter's data_ptr is the built launcher's to call."""
    k, launcher = kernel
    w = torch.nn.Parameter(torch.randn(64))
    for _ in range(2):
        launcher[(1,)](w, 10, scale=0.5, BLOCK=16)
    (_, _, values, _), = k.runs
    assert values[0] is w


def test_installed_launch_hooks_see_the_tensors_as_tritons_launch_passes_them(kernel, monkeypatch):
    import triton
    k, launcher = kernel
    hooks = triton.knobs.runtime
    chain = type(hooks.launch_enter_hook)()
    chain.add(lambda metadata: None)
    monkeypatch.setattr(hooks, "launch_enter_hook", chain)
    x = torch.randn(64)
    for _ in range(2):
        launcher[(1,)](x, 10, scale=0.5, BLOCK=16)
    (_, _, values, (metadata, enter, exit)), = k.runs
    assert values[0] is x and enter is chain and exit is hooks.launch_exit_hook


def test_each_kind_of_argument_keys_as_triton_specializes_it():
    """Scalars by value, a bool or a float with its class (True == 1 == 1.0, which Triton builds apart); a tensor
    (plain or a subclass) by dtype, 16-byte alignment and whether it is on the device: a host tensor's key differs
    from a device one's, so it never launches as an address (its first call goes through Triton, which refuses it);
    a descriptor by element type and block shape."""
    x = torch.randn(64)
    key = launching._key([x, x[1:], torch.nn.Parameter(x), 3, 0.5, True, None, "s"])
    assert key == [(torch.float32, True, False), (torch.float32, False, False), (torch.float32, True, False),
                   3, (float, 0.5), (bool, True), None, "s"]
    assert len({tuple(launching._key([v])) for v in (1, True, 1.0)}) == 3
    if launching.TensorDescriptor is not None:
        desc = launching.TensorDescriptor(x.view(8, 8), [8, 8], [8, 1], [4, 8])
        assert launching._key([desc]) == [("desc", torch.float32, (4, 8), "zero")]


@pytest.mark.parametrize("change",
                         ["int", "int as float", "dtype", "alignment", "constexpr", "warps", "maxnreg"])
def test_whatever_triton_specializes_on_goes_back_through_triton(kernel, change):
    k, launcher = kernel
    x = torch.randn(64)
    args, kwargs = [x, 32], dict(scale=0.5, BLOCK=16, num_warps=4)
    launcher[(1,)](*args, **kwargs)
    if change == "int":
        args[1] = 33  # no longer divisible by 16
    elif change == "int as float":
        args[1] = 32.0  # equal to 32, and an fp32 argument to Triton
    elif change == "dtype":
        args[0] = x.double()
    elif change == "alignment":
        args[0] = x[1:]  # 4 bytes past a 16-byte boundary
    elif change == "constexpr":
        kwargs["BLOCK"] = 32
    elif change == "maxnreg":
        kwargs["maxnreg"] = 128  # a register cap is another build
    else:
        kwargs["num_warps"] = 8
    launcher[(1,)](*args, **kwargs)
    assert len(k.triton_calls) == 2 and not k.runs
    assert k.triton_calls[1][2] == kwargs  # Triton gets the launch options as given


def test_the_cache_starts_over_past_its_limit(kernel, monkeypatch):
    k, launcher = kernel
    monkeypatch.setattr(launching, "CACHE_LIMIT", 2)
    x = torch.randn(64)
    for n in (1, 2, 3, 1):  # the fourth call finds its key gone with the first two
        launcher[(1,)](x, n, scale=0.5, BLOCK=16)
    assert [call[1][1] for call in k.triton_calls] == [1, 2, 3, 1] and len(launcher.built) == 2


def test_cdiv():
    assert [cdiv(a, 4) for a in (1, 4, 5, 8)] == [1, 1, 2, 2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="built kernels need a GPU")
def test_attention_through_launcher_equals_triton_dispatch():
    from proxycomp.kernels import attention as A

    gen = torch.Generator("cuda").manual_seed(0)
    base = torch.randn(3 * 2 * 333 * 64 + 8, device="cuda", dtype=torch.bfloat16, generator=gen)
    launchers = (A._FWD, A._DKDV, A._DQ)

    def run(offset):  # q, k, v as views into one buffer: offset 4 (8 bytes) leaves them 16-byte misaligned
        q, k, v = (base[offset:offset + 2 * 333 * 64 * 3].view(3, 2, 333, 64)[i] for i in range(3))
        q, k, v = (t.unsqueeze(0).detach().requires_grad_() for t in (q, k, v))
        doc_ids = (torch.arange(333, device="cuda") // 50).unsqueeze(0)
        out = A.flash_attention(q, k, v, doc_ids)
        return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))

    for offset in (0, 4):
        for launcher in launchers:
            launcher.direct = False
        want = run(offset)
        for launcher in launchers:
            launcher.direct = True
        run(offset)  # first call of this key: through Triton, then kept
        before = {id(launcher): len(launcher.built) for launcher in launchers}
        got = run(offset)
        assert all(len(launcher.built) == before[id(launcher)] for launcher in launchers)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    assert len(A._FWD.built) >= 2  # the misaligned views got builds of their own
