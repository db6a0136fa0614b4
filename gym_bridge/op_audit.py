"""Which aten compute ops run inside ModelNew.forward, seen by a dispatch mode in the candidate process.

Allocation, view, metadata and copy ops are the glue around a kernel launch; anything else (matmul,
activations, reductions, arithmetic) means torch, not the candidate's Triton, did computation. The profiler
sees the same calls by another route; torch compute that it sees and this mode does not means the mode was
switched off (judge.py). The glue list is the judge's too.
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

GLUE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "arange", "scalar_tensor",
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
    "flatten", "unflatten", "select", "slice", "split", "split_with_sizes", "chunk", "narrow", "alias", "detach",
    "contiguous", "clone", "copy_", "_to_copy", "to", "lift_fresh", "_local_scalar_dense", "stride", "size",
    "numel", "dim", "is_contiguous", "sym_size", "sym_stride", "sym_numel", "set_", "resize_", "item",
    "view_as", "expand_as", "reshape_as", "unbind", "movedim", "diagonal", "_reshape_alias", "resolve_conj",
    "resolve_neg", "broadcast_tensors", "broadcast_to", "type_as", "result_type", "is_nonzero", "detach_",
    "lift", "lift_fresh_copy", "_lazy_clone", "_has_compatible_shallow_copy_type", "_copy_from",
    "_copy_from_and_resize",
})  # detach_ and lift_fresh_copy: what torch.tensor(...) dispatches to make a tensor from Python values


class OpAudit(TorchDispatchMode):
    """Collect the names of non-glue aten ops dispatched while active."""

    def __init__(self, extra_allowed: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.allowed = GLUE_OPS | frozenset(extra_allowed)
        self.compute_ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket.__name__
        if packet not in self.allowed and str(func.name()).split("::")[-1] not in self.allowed:
            self.compute_ops.add(packet)
        return func(*args, **(kwargs or {}))
