"""The kernels' launchers as torch ops, for torch.compile.

Under torch.compile each launcher is one opaque call in the graph, not a traced Triton launch (on triton 3.6 that
passed a float argument as fp64 and failed) nor a graph break. They are plain dispatcher ops rather than
`torch.library.custom_op`s: a custom op wraps every call in Python, its autograd kernel redispatching and its backend
kernel checking the outputs for aliasing, which the compiled graph paid on every layer's forward and backward. Host
us per layer's fwd+bwd in a compiled chain of attentions, launches stubbed, on a 2-core CPU: ~250 -> ~50 under
torch 2.11 (the H200 image's), 84 -> 50 under 2.13. Gradients come from an autograd.Function around the ops, which
Dynamo traces into the graph's backward. No Triton here: the model's RoPE angles are an op of this kind too.
"""
from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("proxycomp", "FRAGMENT")  # kept alive here: a collected Library drops its ops


def define_op(name: str, schema: str, kernel, fake):
    """Register `proxycomp::name` with `schema` ("(args) -> outputs", written out: the modules' annotations are
    postponed strings), `kernel` as its implementation on every device and `fake` as its shapes for the compiler.
    Autograd falls through: the op by itself is not differentiable (its outputs never require grad); where a
    gradient is needed, an autograd.Function around it gives it. Returns the op."""
    _LIBRARY.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
    _LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    _LIBRARY.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"proxycomp::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.proxycomp, name).default
