"""A deterministic family of KernelBench-format tasks, each with an honest Triton solution and broken variants.

A task is a *composition*: a template filled with a sequence of ops (``ops``). Each op is written once, as the
reference's torch expression and the kernel's Triton statements, so the reference and the solution (``render``)
and the broken variants (``broken``) of a task all come from one composition. ``sample`` draws compositions and
sizes and fixes the held-out split from the seed, ``generate`` puts them together into a family, the same for the
same arguments, and ``files`` writes a family to disk as a task set (and reads a task's broken variants back).
Imports run one way, from the catalogue up: ops <- render, sample <- broken <- generate <- files.
"""
