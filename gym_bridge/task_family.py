"""A deterministic family of KernelBench-format tasks, each with an honest Triton solution and broken variants.

A task is a *composition*: a template filled with a sequence of ops.

- ``elementwise``: an optional binary op (with a second input tensor, or a learned per-column weight or bias),
  then a chain of unary ops, fused in one pass over the flattened elements;
- ``row_reduce``: unary ops, one row reduction over the last dimension (sum, mean, max, ...), unary ops on the
  reduced values; one program per row;
- ``row_norm``: unary ops, one row-wise norm or softmax-like op, unary ops; one program per row;
- ``gemm``: ``nn.Linear`` then unary ops run on the float32 accumulator before the one store;
- ``conv1d``: ``nn.Conv1d`` ("same" padding) then unary ops on the accumulator.

Tasks follow the shipped tasks' format (``CATEGORY``, ``SIZES`` with "cpu", "gpu" and "gpu_heldout" shapes,
float32) and their solutions the house style (one kernel, torch only for allocation and views, IEEE fp32 dots).
Each op is written once, as the reference's torch expression and the kernel's Triton statements, so the
reference, the solution and the broken variants of a task all come from one composition.

Splits, from ``seed``: a few ops of each kind are *held out* (never in a train task), and a share of the
compositions of seen ops (by a hash of their op names) is reserved. The held-out split holds tasks with a
held-out op and tasks with a reserved composition, so neither its ops nor its compositions occur in training.
Compositions equal to a shipped task (relu, softmax, linear + relu, ...) are never generated: the 29 shipped
tasks stay a second held-out set.

Broken variants, for fix-up turns: ``wrong_op`` (one op replaced by another of its kind), ``missing_op`` (one
unary op dropped), each kept only when the changed reference differs from the task's at the cpu size (checked
with torch here), and ``launch_error`` (a constexpr missing from the launch: Triton raises). A train task's
changed compositions obey the train split's rules too, since warm starts train on broken code.

Op constraints keep every solution exact to the fp32 tolerance: a practical magnitude bound is carried through
the ops (randn inputs, |x| <= 6 per unit of scale) and a composition whose bound passes ``MAX_BOUND`` (exp of
a large value, say) is redrawn.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .tasks import SPLITS_FILE

TEMPLATES = ("elementwise", "row_reduce", "row_norm", "gemm", "conv1d")
TEMPLATE_WEIGHTS = (0.3, 0.2, 0.25, 0.15, 0.1)
CATEGORY = {"elementwise": "elementwise", "row_reduce": "reduction", "row_norm": "norm",
            "gemm": "matmul_fusion", "conv1d": "conv_pool"}
BROKEN_KINDS = ("wrong_op", "missing_op", "launch_error")
MAX_BOUND = 1e6
RESERVED_SHARE = 0.1  # share of the compositions of seen ops reserved for the held-out split


@dataclass(frozen=True)
class Op:
    """One op, written for the reference (torch) and for the kernel (Triton statements).

    ``torch`` and ``triton`` are format strings: ``{x}`` the value (``acc`` in the matmul and conv kernels),
    ``{c0}``, ``{c1}`` its constants; each ``triton`` line is a statement and the last assigns ``{x}``.
    ``bound(b, n)`` is a practical bound of |output| from the input's bound b and the row length n.
    """

    name: str
    kind: str  # unary, binary (second input tensor), param (learned per-column vector), reduce, norm
    torch: str
    triton: str
    bound: Callable[[float, int], float]
    consts: tuple[tuple[float, ...], ...] = ()
    holdable: bool = True  # may be held out of training


def _same(b: float, n: int) -> float:
    return b


UNARY = [
    Op("relu", "unary", "torch.relu({x})", "{x} = tl.maximum({x}, 0.0)", _same),
    Op("leaky_relu", "unary", "F.leaky_relu({x}, {c0})", "{x} = tl.where({x} > 0, {x}, {x} * {c0})", _same,
       ((0.01, 0.05, 0.1, 0.2),)),
    Op("sigmoid", "unary", "torch.sigmoid({x})", "{x} = tl.sigmoid({x})", lambda b, n: 1.0),
    Op("tanh", "unary", "torch.tanh({x})", "{x} = 2.0 * tl.sigmoid(2.0 * {x}) - 1.0", lambda b, n: 1.0),
    Op("silu", "unary", "F.silu({x})", "{x} = {x} * tl.sigmoid({x})", _same),
    Op("gelu", "unary", "F.gelu({x})", "{x} = 0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))", _same),
    Op("gelu_tanh", "unary", 'F.gelu({x}, approximate="tanh")',
       "{x} = {x} * tl.sigmoid(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))", _same),
    Op("softplus", "unary", "F.softplus({x})", "{x} = tl.where({x} > 20.0, {x}, tl.log(1.0 + tl.exp({x})))",
       lambda b, n: b + 1),
    Op("mish", "unary", "F.mish({x})",
       "sp = tl.where({x} > 20.0, {x}, tl.log(1.0 + tl.exp({x})))\n{x} = {x} * (2.0 * tl.sigmoid(2.0 * sp) - 1.0)",
       _same),
    Op("elu", "unary", "F.elu({x})", "{x} = tl.where({x} > 0, {x}, tl.exp({x}) - 1.0)", _same),
    Op("selu", "unary", "F.selu({x})",
       "{x} = 1.0507009873554805 * tl.where({x} > 0, {x}, 1.6732632423543772 * (tl.exp({x}) - 1.0))",
       lambda b, n: 1.06 * b + 1.8),
    Op("logsigmoid", "unary", "F.logsigmoid({x})", "{x} = tl.minimum({x}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({x})))",
       lambda b, n: b + 1),
    Op("hardsigmoid", "unary", "F.hardsigmoid({x})", "{x} = tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)",
       lambda b, n: 1.0),
    Op("hardswish", "unary", "F.hardswish({x})", "{x} = {x} * tl.minimum(tl.maximum({x} + 3.0, 0.0), 6.0) / 6.0",
       _same),
    Op("relu6", "unary", "F.relu6({x})", "{x} = tl.minimum(tl.maximum({x}, 0.0), 6.0)", lambda b, n: 6.0),
    Op("clamp", "unary", "torch.clamp({x}, {c0}, {c1})", "{x} = tl.minimum(tl.maximum({x}, {c0}), {c1})",
       lambda b, n: 2.0, ((-2.0, -1.0, -0.5), (0.5, 1.0, 2.0))),
    Op("softsign", "unary", "F.softsign({x})", "{x} = {x} / (1.0 + tl.abs({x}))", lambda b, n: 1.0),
    Op("abs", "unary", "torch.abs({x})", "{x} = tl.abs({x})", _same),
    Op("square", "unary", "torch.square({x})", "{x} = {x} * {x}", lambda b, n: b * b),
    Op("cube", "unary", "torch.pow({x}, 3)", "{x} = {x} * {x} * {x}", lambda b, n: b ** 3),
    Op("exp", "unary", "torch.exp({x})", "{x} = tl.exp({x})", lambda b, n: math.exp(min(b, 700.0))),
    Op("exp_neg_abs", "unary", "torch.exp(-torch.abs({x}))", "{x} = tl.exp(-tl.abs({x}))", lambda b, n: 1.0),
    Op("log1p_abs", "unary", "torch.log1p(torch.abs({x}))", "{x} = tl.log(1.0 + tl.abs({x}))",
       lambda b, n: math.log1p(b)),
    Op("sqrt1p_abs", "unary", "torch.sqrt(1.0 + torch.abs({x}))", "{x} = tl.sqrt(1.0 + tl.abs({x}))",
       lambda b, n: math.sqrt(1 + b)),
    Op("inv_quad", "unary", "1.0 / (1.0 + {x} * {x})", "{x} = 1.0 / (1.0 + {x} * {x})", lambda b, n: 1.0),
    Op("scale", "unary", "{x} * {c0}", "{x} = {x} * {c0}", lambda b, n: 3.0 * b,
       ((0.25, 0.5, 1.5, 2.0, 3.0, -1.0, -0.5),), holdable=False),
    Op("shift", "unary", "{x} + {c0}", "{x} = {x} + {c0}", lambda b, n: b + 1.0,
       ((-1.0, -0.5, 0.1, 0.5, 1.0),), holdable=False),
]
BINARY = [
    Op("add", "binary", "{x} + y", "{x} = {x} + tl.load(y_ptr + offs, mask=mask)", lambda b, n: 2 * b),
    Op("sub", "binary", "{x} - y", "{x} = {x} - tl.load(y_ptr + offs, mask=mask)", lambda b, n: 2 * b),
    Op("mul", "binary", "{x} * y", "{x} = {x} * tl.load(y_ptr + offs, mask=mask)", lambda b, n: b * b),
    Op("maximum", "binary", "torch.maximum({x}, y)", "{x} = tl.maximum({x}, tl.load(y_ptr + offs, mask=mask))",
       _same),
    Op("minimum", "binary", "torch.minimum({x}, y)", "{x} = tl.minimum({x}, tl.load(y_ptr + offs, mask=mask))",
       _same),
    Op("col_scale", "param", "{x} * self.weight", "{x} = {x} * tl.load(w_ptr + offs % n_cols, mask=mask)",
       lambda b, n: 5 * b),
    Op("col_bias", "param", "{x} + self.weight", "{x} = {x} + tl.load(w_ptr + offs % n_cols, mask=mask)",
       lambda b, n: b + 5),
]
_ROW = "tl.where(mask, {x}, 0.0)"
REDUCE = [
    Op("sum", "reduce", "{x}.sum(dim=-1)", f"{{x}} = tl.sum({_ROW}, axis=0)", lambda b, n: b * n),
    Op("mean", "reduce", "{x}.mean(dim=-1)", f"{{x}} = tl.sum({_ROW}, axis=0) / n_cols", _same),
    Op("amax", "reduce", "{x}.amax(dim=-1)", '{x} = tl.max(tl.where(mask, {x}, float("-inf")), axis=0)', _same),
    Op("amin", "reduce", "{x}.amin(dim=-1)", '{x} = tl.min(tl.where(mask, {x}, float("inf")), axis=0)', _same),
    Op("logsumexp", "reduce", "torch.logsumexp({x}, dim=-1)",
       'm = tl.max(tl.where(mask, {x}, float("-inf")), axis=0)\n'
       "{x} = m + tl.log(tl.sum(tl.where(mask, tl.exp({x} - m), 0.0), axis=0))", lambda b, n: b + math.log(n)),
    Op("l2", "reduce", "torch.linalg.vector_norm({x}, dim=-1)",
       "{x} = tl.sqrt(tl.sum(tl.where(mask, {x} * {x}, 0.0), axis=0))", lambda b, n: b * math.sqrt(n)),
    Op("var", "reduce", "{x}.var(dim=-1, correction=0)",
       f"mean = tl.sum({_ROW}, axis=0) / n_cols\nd = tl.where(mask, {{x}} - mean, 0.0)\n"
       "{x} = tl.sum(d * d, axis=0) / n_cols",
       lambda b, n: b * b),
]
NORM = [
    Op("softmax", "norm", "torch.softmax({x}, dim=-1)",
       '{x} = tl.where(mask, {x}, float("-inf"))\n{x} = tl.exp({x} - tl.max({x}, axis=0))\n'
       '{x} = {x} / tl.sum({x}, axis=0)',
       lambda b, n: 1.0),
    Op("log_softmax", "norm", "torch.log_softmax({x}, dim=-1)",
       '{x} = tl.where(mask, {x}, float("-inf"))\nm = tl.max({x}, axis=0)\n'
       "{x} = {x} - m - tl.log(tl.sum(tl.exp({x} - m), axis=0))", lambda b, n: 2 * b + math.log(n)),
    Op("softmin", "norm", "F.softmin({x}, dim=-1)",
       '{x} = tl.where(mask, -{x}, float("-inf"))\n{x} = tl.exp({x} - tl.max({x}, axis=0))\n'
       '{x} = {x} / tl.sum({x}, axis=0)',
       lambda b, n: 1.0),
    Op("layernorm", "norm", "F.layer_norm({x}, ({x}.shape[-1],), eps=1e-5)",
       f"mean = tl.sum({_ROW}, axis=0) / n_cols\n{{x}} = tl.where(mask, {{x}} - mean, 0.0)\n"
       "{x} = {x} / tl.sqrt(tl.sum({x} * {x}, axis=0) / n_cols + 1e-5)", lambda b, n: math.sqrt(n)),
    Op("rmsnorm", "norm", "{x} * torch.rsqrt({x}.pow(2).mean(dim=-1, keepdim=True) + 1e-6)",
       "{x} = {x} * tl.rsqrt(tl.sum(tl.where(mask, {x} * {x}, 0.0), axis=0) / n_cols + 1e-6)",
       lambda b, n: math.sqrt(n)),
    Op("l2_normalize", "norm", "F.normalize({x}, dim=-1)",
       "{x} = {x} / tl.maximum(tl.sqrt(tl.sum(tl.where(mask, {x} * {x}, 0.0), axis=0)), 1e-12)", lambda b, n: 1.0),
    Op("mean_center", "norm", "{x} - {x}.mean(dim=-1, keepdim=True)",
       f"{{x}} = {{x}} - tl.sum({_ROW}, axis=0) / n_cols", lambda b, n: 2 * b),
]
OPS = {op.name: op for op in UNARY + BINARY + REDUCE + NORM}
HELD_OUT_PER_KIND = {"unary": 4, "binary": 1, "param": 0, "reduce": 1, "norm": 1}
# Compositions that are shipped tasks (or nearly): never generated, so the shipped tasks stay held out.
SHIPPED = {("elementwise", "relu"), ("elementwise", "silu"), ("elementwise", "gelu_tanh"),
           ("elementwise", "leaky_relu", "scale"), ("row_norm", "softmax"), ("row_norm", "log_softmax"),
           ("row_norm", "layernorm"), ("row_norm", "rmsnorm"), ("row_reduce", "sum"), ("row_reduce", "mean"),
           ("row_reduce", "amax"), ("row_reduce", "l2"), ("gemm", "relu"), ("gemm", "gelu"), ("gemm", "scale")}

# Shapes per template: (cpu, gpu, gpu_heldout) choices of each dimension.
SHAPES = {
    "elementwise": {"rows": ((3, 5, 7, 9), (2048, 4096, 8192), (3000, 6000)),
                    "cols": ((301, 555, 1001, 1500), (1024, 2048, 4096), (1536, 5000))},
    "row": {"rows": ((4, 6, 9, 12), (4096, 8192, 16384), (5000, 12000)),  # cols <= 8192: a row is one block
            "cols": ((200, 777, 1000, 1500), (512, 1024, 2048, 4096), (768, 3000, 6000))},
    "gemm": {"batch": ((32, 48, 64), (2048, 4096), (3072,)),
             "in_features": ((48, 80, 96), (512, 1024, 2048), (768, 1536)),
             "out_features": ((40, 64, 96), (512, 1024, 2048), (768, 1280))},
    "conv1d": {"batch": ((2,), (16, 32), (24,)), "in_channels": ((3, 4, 6), (32, 64), (48,)),
               "out_channels": ((4, 8), (64, 128), (96,)), "length": ((200, 300, 400), (2048, 4096), (3000,)),
               "kernel_size": ((3, 5), (3, 5), (3, 5))},
}


@dataclass(frozen=True)
class Step:
    op: str
    consts: tuple[float, ...] = ()

    def label(self) -> str:
        return self.op + (f"({', '.join(map(repr, self.consts))})" if self.consts else "")


@dataclass(frozen=True)
class Composition:
    template: str
    steps: tuple[Step, ...]
    scale: float = 1.0  # inputs are randn * scale

    @property
    def signature(self) -> tuple[str, ...]:
        """What makes two tasks the same composition: the template and the op names in order."""
        return (self.template, *(s.op for s in self.steps))


@dataclass
class GeneratedTask:
    stem: str
    split: str
    composition: Composition
    source: str
    solution: str
    broken: dict[str, str] = field(default_factory=dict)  # kind: code
    changes: dict[str, Composition] = field(default_factory=dict)  # kind: what wrong_op/missing_op code computes


@dataclass
class Family:
    seed: int
    heldout_ops: tuple[str, ...]
    tasks: list[GeneratedTask]

    def split(self, name: str) -> list[GeneratedTask]:
        return [t for t in self.tasks if t.split == name]


# ---- rendering -----------------------------------------------------------------------------------------------
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


# ---- drawing compositions --------------------------------------------------------------------------------------
def _dims(template: str) -> dict:
    return SHAPES["row" if template.startswith("row") else template]


def _draw_sizes(rng: random.Random, template: str) -> dict[str, dict[str, int]]:
    dims = _dims(template)
    sizes = {name: {dim: rng.choice(choices[k]) for dim, choices in dims.items()}
             for k, name in enumerate(("cpu", "gpu", "gpu_heldout"))}
    if template == "conv1d":  # one kernel size per task, whatever the problem size
        for shape in sizes.values():
            shape["kernel_size"] = sizes["cpu"]["kernel_size"]
    return sizes


def _bound_ok(comp: Composition, n: int) -> bool:
    """Every intermediate stays under MAX_BOUND (practical bounds: randn is within 6 sigma at these sizes)."""
    bound = (4.0 if comp.template in ("gemm", "conv1d") else 6.0) * comp.scale
    for step in comp.steps:
        bound = OPS[step.op].bound(bound, n)
        if bound > MAX_BOUND:
            return False
    return True


def _step(rng: random.Random, op: Op) -> Step:
    return Step(op.name, tuple(rng.choice(choices) for choices in op.consts))


def _chain(rng: random.Random, ops: list[Op], length: int) -> list[Step]:
    steps: list[Step] = []
    while len(steps) < length:
        op = rng.choice(ops)
        if not steps or steps[-1].op != op.name:  # relu(relu(x)) teaches nothing
            steps.append(_step(rng, op))
    return steps


def _draw(rng: random.Random, template: str, pool: dict[str, list[Op]]) -> Composition:
    unary = pool["unary"]
    if template == "elementwise":
        core = [_step(rng, rng.choice(pool["binary"] + pool["param"]))] if rng.random() < 0.4 else []
        steps = core + _chain(rng, unary, rng.randint(0 if core else 1, 2 if core else 3))
    elif template in ("row_reduce", "row_norm"):
        row_op = rng.choice(pool["reduce" if template == "row_reduce" else "norm"])
        steps = _chain(rng, unary, rng.randint(0, 2)) + [_step(rng, row_op)] + _chain(rng, unary, rng.randint(0, 1))
    else:
        steps = _chain(rng, unary, rng.randint(1, 3 if template == "gemm" else 2))
    return Composition(template, tuple(steps), rng.choice((1.0, 1.0, 2.0)))


def _reserved(signature: tuple[str, ...], seed: int) -> bool:
    digest = hashlib.blake2b(f"{seed}:{'|'.join(signature)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 1000 < RESERVED_SHARE * 1000


def heldout_ops(seed: int) -> tuple[str, ...]:
    """The ops no train task uses: HELD_OUT_PER_KIND of each kind, drawn from ``seed`` alone."""
    rng = random.Random(f"heldout-ops:{seed}")
    chosen = []
    for kind, count in HELD_OUT_PER_KIND.items():
        candidates = [op.name for op in OPS.values() if op.kind == kind and op.holdable]
        chosen += rng.sample(candidates, count)
    return tuple(sorted(chosen))


# ---- broken variants -------------------------------------------------------------------------------------------
def _reference_output(comp: Composition, sizes: dict):
    """The reference's output at the cpu size (fixed seeds), computed by running its rendered source."""
    import torch

    namespace: dict = {}
    exec(compile(render_task(comp, sizes), "<generated task>", "exec"), namespace)  # noqa: S102 - our own rendered source
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]("cpu"))
    torch.manual_seed(1)
    with torch.no_grad():
        return model(*namespace["get_inputs"]("cpu"))


def _differs(a, b) -> bool:
    import torch

    return a.shape != b.shape or not bool(torch.isclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True).all())


def _mutations(rng: random.Random, comp: Composition) -> dict[str, list[Composition]]:
    """Candidate wrong_op (one op replaced by another of its kind) and missing_op (one unary op dropped)
    compositions of ``comp``, in a random order."""
    steps = list(comp.steps)
    wrong = [Composition(comp.template, tuple(steps[:i] + [_step(rng, op)] + steps[i + 1:]), comp.scale)
             for i, step in enumerate(steps) for op in OPS.values()
             if op.kind == OPS[step.op].kind and op.name != step.op]
    missing = [Composition(comp.template, tuple(steps[:i] + steps[i + 1:]), comp.scale)
               for i, step in enumerate(steps) if OPS[step.op].kind == "unary"]
    for candidates in (wrong, missing):
        rng.shuffle(candidates)
    return {"wrong_op": wrong, "missing_op": missing}


def broken_variants(rng: random.Random, comp: Composition, sizes: dict, doc: str,
                    allowed: Callable[[Composition], bool]) -> tuple[dict[str, str], dict[str, Composition]]:
    """Broken solutions of ``comp`` by kind, and the compositions they compute: the first changed composition that
    ``allowed`` accepts (a train task's may use no held-out op or composition: its broken code is trained on) and
    whose reference output differs at the cpu size (so the gym finds it incorrect); and the solution with a
    constexpr left out of its launch."""
    expected = _reference_output(comp, sizes)
    broken, changes = {}, {}
    for kind, candidates in _mutations(rng, comp).items():
        for changed in candidates[:8]:
            if allowed(changed) and _bound_ok(changed, _max_cols(sizes)) and \
                    _differs(_reference_output(changed, sizes), expected):
                broken[kind], changes[kind] = render_solution(changed, doc), changed
                break
    broken["launch_error"] = render_solution(comp, doc, launch_error=True)
    return broken, changes


# ---- the family --------------------------------------------------------------------------------------------------
def _max_cols(sizes: dict) -> int:
    return max(dims.get("cols", 1) for dims in sizes.values())


def _stem(index: int, comp: Composition) -> str:
    return f"g{index:05d}_{comp.template}_{'_'.join(s.op for s in comp.steps)}"


def generate_family(n: int, seed: int, heldout_fraction: float = 0.1) -> Family:
    """``n`` tasks, ``round(n * heldout_fraction)`` of them held out (half with a held-out op, half with a reserved
    composition of seen ops), the same for the same arguments."""
    if n < 2 or not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"need n >= 2 and 0 < heldout_fraction < 1, got n={n}, heldout_fraction={heldout_fraction}")
    held = set(heldout_ops(seed))
    seen_pool = {kind: [op for op in OPS.values() if op.kind == kind and op.name not in held]
                 for kind in ("unary", "binary", "param", "reduce", "norm")}
    full_pool = {kind: [op for op in OPS.values() if op.kind == kind] for kind in seen_pool}
    n_held = min(max(round(n * heldout_fraction), 1), n - 1)
    buckets = ["train"] * (n - n_held) + ["heldout_op"] * ((n_held + 1) // 2) + ["heldout_composition"] * (n_held // 2)

    def accepts(bucket: str, comp: Composition) -> bool:
        uses_held = any(s.op in held for s in comp.steps)
        reserved = _reserved(comp.signature, seed)
        return comp.signature not in SHIPPED and {
            "train": not uses_held and not reserved, "heldout_op": uses_held,
            "heldout_composition": not uses_held and reserved}[bucket]

    rng = random.Random(f"family:{seed}")
    tasks, sources = [], set()
    for index, bucket in enumerate(buckets):
        pool = full_pool if bucket == "heldout_op" else seen_pool
        for _ in range(100_000):
            template = rng.choices(TEMPLATES, TEMPLATE_WEIGHTS)[0]
            comp, sizes = _draw(rng, template, pool), _draw_sizes(rng, template)
            if not accepts(bucket, comp) or not _bound_ok(comp, _max_cols(sizes)):
                continue
            source = render_task(comp, sizes)
            if source not in sources:
                break
        else:
            raise RuntimeError(f"task family: no new composition for {bucket} after 100000 draws; lower n")
        sources.add(source)
        doc = f"{describe(comp)}, fused in one Triton kernel."
        split = "train" if bucket == "train" else "heldout"
        broken, changes = broken_variants(rng, comp, sizes, doc, lambda c: split == "heldout" or accepts("train", c))
        tasks.append(GeneratedTask(_stem(index, comp), split, comp, source, render_solution(comp, doc), broken,
                                   changes))
    return Family(seed, tuple(sorted(held)), tasks)


def write_family(family: Family, out: Path) -> dict[str, Path]:
    """``out/tasks`` (task files and splits.json: a task set), ``out/solutions/<stem>.py`` beside it,
    ``out/broken/<stem>.<kind>.py``, ``out/corpus/<stem>.py`` (each train task followed by its solution: pretraining
    text, held-out tasks never) and ``out/family.json`` (seed, held-out ops, each task's composition)."""
    out = Path(out)
    folders = {name: out / name for name in ("tasks", "solutions", "broken", "corpus")}
    if (folders["tasks"] / SPLITS_FILE).exists():
        raise FileExistsError(f"{out} already holds a task family; choose another folder")
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    for task in family.tasks:
        (folders["tasks"] / f"{task.stem}.py").write_text(task.source)
        (folders["solutions"] / f"{task.stem}.py").write_text(task.solution)
        for kind, code in task.broken.items():
            (folders["broken"] / f"{task.stem}.{kind}.py").write_text(code)
        if task.split == "train":
            (folders["corpus"] / f"{task.stem}.py").write_text(f"{task.source}\n\n{task.solution}")
    splits = {name: [t.stem for t in family.split(name)] for name in ("train", "heldout")}
    (folders["tasks"] / SPLITS_FILE).write_text(json.dumps(splits, indent=1) + "\n")
    manifest = {"seed": family.seed, "heldout_ops": list(family.heldout_ops),
                "tasks": [{"stem": t.stem, "split": t.split, **asdict(t.composition), "broken": sorted(t.broken),
                           "changes": {kind: [s.op for s in c.steps] for kind, c in t.changes.items()}}
                          for t in family.tasks]}
    (out / "family.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return folders


def read_broken(task_path: Path) -> dict[str, str]:
    """The broken variants written beside a generated task (``../broken/<stem>.<kind>.py``), by kind."""
    folder = Path(task_path).parent.parent / "broken"
    stem = Path(task_path).stem
    return {kind: path.read_text() for kind in BROKEN_KINDS if (path := folder / f"{stem}.{kind}.py").is_file()}
