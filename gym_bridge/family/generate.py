"""A family: ``n`` tasks drawn from a seed, each with its reference, its solution and its broken variants, split
into train and held-out tasks; the same arguments give the same family, byte for byte.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from proxycomp.errors import UserError

from .broken import broken_variants
from .ops import OPS, TEMPLATES, Composition
from .render import describe, render_solution, render_task
from .sample import SHIPPED, TEMPLATE_WEIGHTS, bound_ok, draw_composition, draw_sizes, heldout_ops, is_reserved, \
    max_cols


@dataclass
class GeneratedTask:
    stem: str
    split: str
    composition: Composition
    source: str
    solution: str
    broken: dict[str, str] = field(default_factory=dict)  # kind: code
    changes: dict[str, Composition] = field(default_factory=dict)  # kind: what wrong_op/missing_op code computes
    bucket: str = "train"  # train, heldout_op (uses a held-out op) or heldout_composition (a reserved composition)


@dataclass
class Family:
    seed: int
    heldout_ops: tuple[str, ...]
    tasks: list[GeneratedTask]

    def split(self, name: str) -> list[GeneratedTask]:
        return [t for t in self.tasks if t.split == name]


def _stem(index: int, comp: Composition) -> str:
    return f"g{index:05d}_{comp.template}_{'_'.join(s.op for s in comp.steps)}"


def generate_family(n: int, seed: int, heldout_fraction: float = 0.1) -> Family:
    """``n`` tasks, ``round(n * heldout_fraction)`` of them held out (half with a held-out op, half with a reserved
    composition of seen ops), the same for the same arguments."""
    if n < 2 or not 0.0 < heldout_fraction < 1.0:
        raise UserError(f"need n >= 2 and 0 < heldout_fraction < 1, got n={n}, heldout_fraction={heldout_fraction}")
    held = set(heldout_ops(seed))
    seen_pool = {kind: [op for op in OPS.values() if op.kind == kind and op.name not in held]
                 for kind in ("unary", "binary", "param", "reduce", "norm")}
    full_pool = {kind: [op for op in OPS.values() if op.kind == kind] for kind in seen_pool}
    n_held = min(max(round(n * heldout_fraction), 1), n - 1)
    buckets = ["train"] * (n - n_held) + ["heldout_op"] * ((n_held + 1) // 2) + ["heldout_composition"] * (n_held // 2)

    def accepts(bucket: str, comp: Composition) -> bool:
        uses_held = any(s.op in held for s in comp.steps)
        reserved = is_reserved(comp.signature, seed)
        return comp.signature not in SHIPPED and {
            "train": not uses_held and not reserved, "heldout_op": uses_held,
            "heldout_composition": not uses_held and reserved}[bucket]

    rng = random.Random(f"family:{seed}")
    tasks, sources = [], set()
    for index, bucket in enumerate(buckets):
        pool = full_pool if bucket == "heldout_op" else seen_pool
        for _ in range(100_000):
            template = rng.choices(TEMPLATES, TEMPLATE_WEIGHTS)[0]
            comp, sizes = draw_composition(rng, template, pool), draw_sizes(rng, template)
            if not accepts(bucket, comp) or not bound_ok(comp, max_cols(sizes)):
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
                                   changes, bucket))
    return Family(seed, tuple(sorted(held)), tasks)
