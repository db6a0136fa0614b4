"""Drawing compositions and sizes, and the held-out split. From ``seed``, a few ops of each kind are *held out*
(never in a train task) and a share of the compositions of seen ops (by a hash of their op names) is reserved; the
held-out split holds tasks with a held-out op and tasks with a reserved composition, so neither its ops nor its
compositions occur in training. Compositions equal to a shipped task are never generated: the 29 shipped tasks stay
a second held-out set. A practical magnitude bound is carried through the ops (randn inputs, |x| <= 6 per unit of
scale) and a composition whose bound passes ``MAX_BOUND`` (exp of a large value, say) is redrawn.
"""
from __future__ import annotations

import hashlib
import random

from .ops import OPS, Composition, Op, Step

TEMPLATE_WEIGHTS = (0.3, 0.2, 0.25, 0.15, 0.1)
MAX_BOUND = 1e6
RESERVED_SHARE = 0.1  # share of the compositions of seen ops reserved for the held-out split
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


def _dims(template: str) -> dict:
    return SHAPES["row" if template.startswith("row") else template]


def draw_sizes(rng: random.Random, template: str) -> dict[str, dict[str, int]]:
    dims = _dims(template)
    sizes = {name: {dim: rng.choice(choices[k]) for dim, choices in dims.items()}
             for k, name in enumerate(("cpu", "gpu", "gpu_heldout"))}
    if template == "conv1d":  # one kernel size per task, whatever the problem size
        for shape in sizes.values():
            shape["kernel_size"] = sizes["cpu"]["kernel_size"]
    return sizes


def bound_ok(comp: Composition, n: int) -> bool:
    """Every intermediate stays under MAX_BOUND (practical bounds: randn is within 6 sigma at these sizes)."""
    bound = (4.0 if comp.template in ("gemm", "conv1d") else 6.0) * comp.scale
    for step in comp.steps:
        bound = OPS[step.op].bound(bound, n)
        if bound > MAX_BOUND:
            return False
    return True


def draw_step(rng: random.Random, op: Op) -> Step:
    return Step(op.name, tuple(rng.choice(choices) for choices in op.consts))


def _chain(rng: random.Random, ops: list[Op], length: int) -> list[Step]:
    steps: list[Step] = []
    while len(steps) < length:
        op = rng.choice(ops)
        if not steps or steps[-1].op != op.name:  # relu(relu(x)) teaches nothing
            steps.append(draw_step(rng, op))
    return steps


def draw_composition(rng: random.Random, template: str, pool: dict[str, list[Op]]) -> Composition:
    unary = pool["unary"]
    if template == "elementwise":
        core = [draw_step(rng, rng.choice(pool["binary"] + pool["param"]))] if rng.random() < 0.4 else []
        steps = core + _chain(rng, unary, rng.randint(0 if core else 1, 2 if core else 3))
    elif template in ("row_reduce", "row_norm"):
        row_op = rng.choice(pool["reduce" if template == "row_reduce" else "norm"])
        steps = _chain(rng, unary, rng.randint(0, 2)) + [draw_step(rng, row_op)] + _chain(rng, unary, rng.randint(0, 1))
    else:
        steps = _chain(rng, unary, rng.randint(1, 3 if template == "gemm" else 2))
    return Composition(template, tuple(steps), rng.choice((1.0, 1.0, 2.0)))


def is_reserved(signature: tuple[str, ...], seed: int) -> bool:
    digest = hashlib.blake2b(f"{seed}:{'|'.join(signature)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 1000 < RESERVED_SHARE * 1000


def inside_another(op: Op) -> bool:
    """Whether the op's Triton code (its expression, for a one-statement op) stands verbatim in another op's: held
    out, its code would still be in the train solutions (relu's ``tl.maximum({x}, 0.0)`` is inside relu6's)."""
    code = op.triton.split(" = ", 1)[1] if "\n" not in op.triton else op.triton
    return any(code in other.triton for other in OPS.values() if other.name != op.name)


def heldout_ops(seed: int) -> tuple[str, ...]:
    """The ops no train task uses: HELD_OUT_PER_KIND of each kind, drawn from ``seed`` alone among the holdable ops
    whose code no other op contains."""
    rng = random.Random(f"heldout-ops:{seed}")
    chosen = []
    for kind, count in HELD_OUT_PER_KIND.items():
        candidates = [op.name for op in OPS.values() if op.kind == kind and op.holdable and not inside_another(op)]
        chosen += rng.sample(candidates, count)
    return tuple(sorted(chosen))


def max_cols(sizes: dict) -> int:
    return max(dims.get("cols", 1) for dims in sizes.values())
