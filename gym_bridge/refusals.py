"""Refusals installed into torch in a candidate process before the candidate's code exists.

They live in a module of their own, which names nothing of the harness: a candidate that reaches one of these
functions through its globals or closure (CPython audits neither) finds torch, os, sys and the reporter it was given
(containment.reporter, one per refusal), and no instrument of the harness.
"""
from __future__ import annotations

import os
import sys

import torch

HOST_ONLY_COMPUTE = ("apply_", "map_", "map2_")  # Python callbacks per element: compute no op or kernel shows


def refuse_operator_registration(report) -> None:
    """Python kernels registered into torch's dispatcher (torch.library) would run inside ops the harness itself
    calls (copy_, the RNG, serialization), outside the candidate's calls: refused from here on, unless torch's own
    code asks (a lazily imported torch module registering its operators)."""
    original = torch._C._dispatch_library
    torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
    library = os.path.join(torch_dir, "library.py")
    getframe = sys._getframe

    def guarded(*args, **kwargs):
        frame = getframe(1)
        while frame is not None and os.path.realpath(frame.f_code.co_filename) == library:
            frame = frame.f_back
        if frame is None or not os.path.realpath(frame.f_code.co_filename).startswith(torch_dir):
            code = "monkey_patch:torch.library (operator registration)"
            report(code)
            raise PermissionError(f"gym sandbox: {code} is not allowed")
        return original(*args, **kwargs)

    torch._C._dispatch_library = guarded


def refuse_host_compute(report) -> None:
    """Tensor methods that run a Python function per element (CPU only): compute that neither the op audit nor the
    profiler can see, and that no kernel needs. (TensorBase, a C type, keeps them: reached by a private name only.)"""
    for name in HOST_ONLY_COMPUTE:
        def refused(*args, _name=name, **kwargs):
            report(f"host_compute:Tensor.{_name}")
            raise PermissionError(f"gym sandbox: Tensor.{_name} is not allowed")

        setattr(torch.Tensor, name, refused)
