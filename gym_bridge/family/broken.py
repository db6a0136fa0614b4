"""Broken variants of a task, for fix-up turns: ``wrong_op`` (one op replaced by another of its kind) and
``missing_op`` (one unary op dropped), each kept only when the changed reference differs from the task's at the cpu
size (checked by running both with torch), and ``launch_error`` (a constexpr missing from the launch: Triton
raises). A train task's changed compositions obey the train split's rules too, since warm starts train on broken
code.
"""
from __future__ import annotations

import random
from collections.abc import Callable

from .ops import OPS, Composition
from .render import render_solution, render_task
from .sample import bound_ok, draw_step, max_cols

BROKEN_KINDS = ("wrong_op", "missing_op", "launch_error")


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
    wrong = [Composition(comp.template, tuple(steps[:i] + [draw_step(rng, op)] + steps[i + 1:]), comp.scale)
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
            if allowed(changed) and bound_ok(changed, max_cols(sizes)) and \
                    _differs(_reference_output(changed, sizes), expected):
                broken[kind], changes[kind] = render_solution(changed, doc), changed
                break
    broken["launch_error"] = render_solution(comp, doc, launch_error=True)
    return broken, changes
