"""The op catalogue: every op once, as the reference's torch expression and the kernel's Triton statements, and
the compositions they make. A composition fills a template with a sequence of ops: ``elementwise`` (an optional
binary op, with a second input tensor or a learned per-column weight or bias, then unary ops, fused in one pass over
the flattened elements), ``row_reduce`` (unary ops, one row reduction over the last dimension, unary ops on the
reduced values; one program per row), ``row_norm`` (unary ops, one row-wise norm or softmax-like op, unary ops),
``gemm`` (``nn.Linear`` then unary ops on the float32 accumulator before the one store) and ``conv1d``
(``nn.Conv1d``, "same" padding, then unary ops on the accumulator). Each op carries a practical bound of its
output's magnitude, which the sampler carries through a composition to keep solutions exact to the fp32 tolerance.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

TEMPLATES = ("elementwise", "row_reduce", "row_norm", "gemm", "conv1d")


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
