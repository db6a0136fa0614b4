"""Task and solution text: a composition rendered as a reference file in the shipped tasks' format (KernelBench plus
``CATEGORY`` and ``SIZES`` with "cpu", "gpu" and "gpu_heldout" shapes, float32) and as a Triton solution in the
house style (one kernel, torch only for allocation and views, IEEE fp32 dots), one code writer per template.
``launch_error`` renders the broken variant that leaves a constexpr out of the launch.
"""
from __future__ import annotations

from .ops import OPS, Composition, Step

CATEGORY = {"elementwise": "elementwise", "row_reduce": "reduction", "row_norm": "norm",
            "gemm": "matmul_fusion", "conv1d": "conv_pool"}


def _fmt(template: str, x: str, step: Step) -> str:
    return template.format(x=x, **{f"c{i}": repr(c) for i, c in enumerate(step.consts)})


def _torch_lines(comp: Composition) -> list[str]:
    head = {"gemm": ["x = self.linear(x)"], "conv1d": ["x = self.conv(x)"]}.get(comp.template, [])
    return head + [f"x = {_fmt(OPS[s.op].torch, 'x', s)}" for s in comp.steps]


def _triton_lines(steps: tuple[Step, ...], x: str) -> list[str]:
    return [line for s in steps for line in _fmt(OPS[s.op].triton, x, s).splitlines()]


def describe(comp: Composition) -> str:
    ops = " -> ".join(s.label() for s in comp.steps)
    return {
        "elementwise": f"Elementwise {ops} over 2-D float32 input",
        "row_reduce": f"Row reduction over the last dimension: {ops}",
        "row_norm": f"Row-wise over the last dimension: {ops}",
        "gemm": f"Linear layer (x @ W.T + b) followed by {ops}",
        "conv1d": f'1-D convolution ("same" padding) followed by {ops}',
    }[comp.template]


def _sizes_literal(sizes: dict[str, dict[str, int]]) -> str:
    rows = [f'    "{name}": dict({", ".join(f"{k}={v}" for k, v in dims.items())}),' for name, dims in sizes.items()]
    return "SIZES = {\n" + "\n".join(rows) + "\n}"


def _inputs(comp: Composition) -> tuple[list[str], str, str]:
    """(forward arguments, get_inputs body, get_init_inputs body) of the reference."""
    scale = "" if comp.scale == 1.0 else f" * {comp.scale!r}"
    if comp.template == "gemm":
        return ["x"], f'[torch.randn(s["batch"], s["in_features"]){scale}]', \
            '[SIZES[size]["in_features"], SIZES[size]["out_features"]]'
    if comp.template == "conv1d":
        return ["x"], f'[torch.randn(s["batch"], s["in_channels"], s["length"]){scale}]', \
            '[SIZES[size]["in_channels"], SIZES[size]["out_channels"], SIZES[size]["kernel_size"]]'
    kinds = {OPS[s.op].kind for s in comp.steps}
    tensor = f'torch.randn(s["rows"], s["cols"]){scale}'
    if "binary" in kinds:
        return ["x", "y"], f"[{tensor}, {tensor}]", "[]"
    return ["x"], f"[{tensor}]", '[SIZES[size]["cols"]]' if "param" in kinds else "[]"


def render_task(comp: Composition, sizes: dict[str, dict[str, int]]) -> str:
    """The reference file: KernelBench format plus CATEGORY and SIZES."""
    args, inputs, init = _inputs(comp)
    signature = ", ".join(f"{a}: torch.Tensor" for a in args)
    if comp.template == "gemm":
        init_sig = "in_features: int, out_features: int"
        members = ["self.linear = nn.Linear(in_features, out_features)"]
    elif comp.template == "conv1d":
        init_sig = "in_channels: int, out_channels: int, kernel_size: int"
        members = ["self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)"]
    elif init != "[]":
        init_sig, members = "cols: int", ["self.weight = nn.Parameter(torch.randn(cols))"]
    else:
        init_sig, members = "", []
    body = "\n".join(f"        {line}" for line in _torch_lines(comp))
    uses_f = "F." in body
    return f'''"""{describe(comp)}."""
import torch
import torch.nn as nn
{"import torch.nn.functional as F" + chr(10) if uses_f else ""}
CATEGORY = "{CATEGORY[comp.template]}"
{_sizes_literal(sizes)}


class Model(nn.Module):
    def __init__(self{", " + init_sig if init_sig else ""}):
        super().__init__()
{"".join(f"        {m}{chr(10)}" for m in members)}
    def forward(self, {signature}) -> torch.Tensor:
{body}
        return x


def get_inputs(size: str = "gpu") -> list:
    s = SIZES[size]
    return {inputs}


def get_init_inputs(size: str = "gpu") -> list:
    return {init}
'''


_HEADER = '''"""{doc}"""
import torch
import torch.nn as nn
import triton
import triton.language as tl
'''


def _indent(lines: list[str], depth: int = 1) -> str:
    return "\n".join("    " * depth + line for line in lines)


def render_solution(comp: Composition, doc: str, launch_error: bool = False) -> str:
    """The Triton solution of ``comp``; ``launch_error`` leaves a constexpr out of the launch (a broken variant)."""
    return {"elementwise": _elementwise, "row_reduce": _row, "row_norm": _row, "gemm": _gemm,
            "conv1d": _conv1d}[comp.template](comp, doc, launch_error)


def _launch(name: str, grid: str, args: str, consts: list[str], extra: str, launch_error: bool) -> str:
    kept = consts[1:] if launch_error else consts
    return f"{name}[{grid}](\n            {args},\n            {', '.join(kept + [extra])},\n        )"


def _elementwise(comp: Composition, doc: str, launch_error: bool) -> str:
    kinds = {OPS[s.op].kind for s in comp.steps}
    binary, param = "binary" in kinds, "param" in kinds
    params = ["x_ptr"] + (["y_ptr"] if binary else []) + (["w_ptr"] if param else []) + ["out_ptr", "n"] + \
        (["n_cols"] if param else [])
    args = ["x"] + (["y"] if binary else []) + (["self.weight"] if param else []) + ["out", "n"] + \
        (["x.shape[-1]"] if param else [])
    kernel = _indent(["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n",
                      "x = tl.load(x_ptr + offs, mask=mask)", *_triton_lines(comp.steps, "x"),
                      "tl.store(out_ptr + offs, x, mask=mask)"])
    init = ["super().__init__()"] + (["self.weight = nn.Parameter(torch.randn(cols))"] if param else [])
    forward = ["x = x.contiguous()"] + (["y = y.contiguous()"] if binary else []) + [
        "out = torch.empty_like(x)", "n = x.numel()",
        _launch("fused_kernel", "(triton.cdiv(n, BLOCK),)", ", ".join(args), ["BLOCK=BLOCK"], "num_warps=4",
                launch_error), "return out"]
    return _HEADER.format(doc=doc) + f'''
BLOCK = 1024


@triton.jit
def fused_kernel({", ".join(params)}, BLOCK: tl.constexpr):
{kernel}


class ModelNew(nn.Module):
    def __init__(self{", cols: int" if param else ""}):
{_indent(init, 2)}

    def forward(self, {", ".join(f"{a}: torch.Tensor" for a in (["x", "y"] if binary else ["x"]))}) -> torch.Tensor:
{_indent(forward, 2)}
'''


def _row(comp: Composition, doc: str, launch_error: bool) -> str:
    reduce = comp.template == "row_reduce"
    store = "tl.store(out_ptr + row, x)" if reduce else "tl.store(out_ptr + row * n_cols + offs, x, mask=mask)"
    kernel = _indent(["row = tl.program_id(0).to(tl.int64)", "offs = tl.arange(0, BLOCK)", "mask = offs < n_cols",
                      "x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)",
                      *_triton_lines(comp.steps, "x"), store])
    out = "torch.empty(rows, dtype=x.dtype, device=x.device)" if reduce else "torch.empty_like(x)"
    forward = ["x = x.contiguous()", "n_cols = x.shape[-1]", "rows = x.numel() // n_cols", f"out = {out}",
               "block = triton.next_power_of_2(n_cols)",
               "num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4",
               _launch("row_kernel", "(rows,)", "x, out, n_cols", ["BLOCK=block"], "num_warps=num_warps", launch_error),
               "return out"]
    return _HEADER.format(doc=doc) + f'''

@triton.jit
def row_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
{kernel}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{_indent(forward, 2)}
'''


def _gemm(comp: Composition, doc: str, launch_error: bool) -> str:
    epilogue = _indent(_triton_lines(comp.steps, "acc"))
    launch = _launch("linear_epilogue_kernel", "grid", "x2, w, b, y, m, n, k",
                     ["BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "BLOCK_K=BLOCK_K"], "num_warps=4", launch_error)
    return _HEADER.format(doc=doc) + f'''
BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32


@triton.jit
def linear_epilogue_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        # W is (N, K): reading it as a (K, N) tile computes x @ W.T without a transpose copy.
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
{epilogue}
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        w, b = self.linear.weight.contiguous(), self.linear.bias
        m, k = x2.shape
        n = w.shape[0]
        y = torch.empty(m, n, dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
        {launch}
        return y.view(*x.shape[:-1], n)
'''


def _conv1d(comp: Composition, doc: str, launch_error: bool) -> str:
    epilogue = _indent(_triton_lines(comp.steps, "acc"))
    launch = _launch("conv1d_epilogue_kernel", "grid", "x, w, b, y, c_in, c_out, l_in, l_out, pad",
                     ["KSIZE=ksize", "BLOCK_OC=block_oc", "BLOCK_IC=block_ic", "BLOCK_L=BLOCK_L"], "num_warps=4",
                     launch_error)
    return _HEADER.format(doc=doc) + f'''
BLOCK_L = 128


@triton.jit
def conv1d_epilogue_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C_IN, C_OUT, L_IN, L_OUT, PAD, KSIZE: tl.constexpr,
                           BLOCK_OC: tl.constexpr, BLOCK_IC: tl.constexpr, BLOCK_L: tl.constexpr):
    batch = tl.program_id(2).to(tl.int64)
    ocs = tl.program_id(1) * BLOCK_OC + tl.arange(0, BLOCK_OC)
    ls = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros((BLOCK_OC, BLOCK_L), tl.float32)
    for k in tl.static_range(KSIZE):
        pos = ls + k - PAD
        for c0 in range(0, C_IN, BLOCK_IC):
            ics = c0 + tl.arange(0, BLOCK_IC)
            w = tl.load(w_ptr + (ocs[:, None] * C_IN + ics[None, :]) * KSIZE + k,
                        mask=(ocs[:, None] < C_OUT) & (ics[None, :] < C_IN), other=0.0)
            # Zero padding is the load mask: no padded copy of x.
            xs = tl.load(x_ptr + (batch * C_IN + ics[:, None]) * L_IN + pos[None, :],
                         mask=(ics[:, None] < C_IN) & (pos[None, :] >= 0) & (pos[None, :] < L_IN), other=0.0)
            acc = tl.dot(w, xs, acc, input_precision="ieee")
    acc += tl.load(b_ptr + ocs, mask=ocs < C_OUT, other=0.0)[:, None]
{epilogue}
    tl.store(y_ptr + (batch * C_OUT + ocs[:, None]) * L_OUT + ls[None, :], acc,
             mask=(ocs[:, None] < C_OUT) & (ls[None, :] < L_OUT))


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.conv.weight.contiguous(), self.conv.bias
        batch, c_in, l_in = x.shape
        c_out, _, ksize = w.shape
        pad = self.conv.padding[0]
        l_out = l_in + 2 * pad - ksize + 1
        y = torch.empty(batch, c_out, l_out, dtype=x.dtype, device=x.device)
        # tl.dot needs every tile side >= 16; masks cover the padding lanes.
        block_oc = max(16, min(64, triton.next_power_of_2(c_out)))
        block_ic = max(16, min(32, triton.next_power_of_2(c_in)))
        grid = (triton.cdiv(l_out, BLOCK_L), triton.cdiv(c_out, block_oc), batch)
        {launch}
        return y
'''
