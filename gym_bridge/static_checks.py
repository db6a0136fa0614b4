"""AST checks on candidate source, run in the parent before anything executes.

Policy: a pattern that an honest single-task Triton kernel never needs is a *verdict* (the candidate is
flagged and not run): monkey-patching attributes of torch/triton/time/..., process creation, ctypes/cffi,
threads and other concurrency, network modules, exit calls, tensor subclasses or __torch_dispatch__/
__torch_function__ or classes made by type(), side CUDA streams, try/except (a fallback hides which code produced
the output), references to the reference `Model`/`super().forward`, torch's and Triton's private internals (the
dispatch-mode stack, the profiler's switches), compute on the host (numpy), and introspection of the process
(gc, sys, pkgutil, module tables, frames, closures, builtins). Patterns that can be honest are *warnings*, reported
in the feedback: reduced-precision casts and TF32 switches. None of this is what makes a verdict trustworthy: the
judge checks outputs, clock and coverage out of the candidate's reach (judge.py); these checks only refuse early
what no honest kernel writes.
"""
from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field

PATCHABLE_ROOTS = {"torch", "triton", "tl", "time", "F", "nn", "np", "numpy", "os", "sys", "math", "builtins"}
BANNED_MODULES = {
    "subprocess": "process_spawn", "multiprocessing": "process_spawn", "pty": "process_spawn",
    "ctypes": "native_code", "cffi": "native_code",
    "threading": "concurrency", "_thread": "concurrency", "concurrent": "concurrency", "asyncio": "concurrency",
    "socket": "network", "urllib": "network", "http": "network", "requests": "network",
    "gc": "introspection", "inspect": "introspection", "importlib": "introspection", "builtins": "introspection",
    "sys": "introspection", "pkgutil": "introspection", "types": "introspection",
    "signal": "exit_call", "faulthandler": "exit_call", "resource": "exit_call",
    "proxycomp": "introspection", "pickle": "native_code", "marshal": "native_code",
    "numpy": "host_compute", "torch.multiprocessing": "process_spawn", "torch.distributed": "network",
}
PRIVATE_ROOTS = {"torch", "triton", "tl", "F", "nn"}  # their underscore names are internals, not API
OS_SPAWN = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execl",
            "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnv", "spawnve", "kill"}
EXIT_CALLS = {"exit", "quit", "_exit", "abort"}
INTROSPECTION_ATTRS = {"f_back", "f_globals", "f_locals", "tb_frame", "gi_frame", "cr_frame", "__closure__",
                       "__globals__", "__code__", "cell_contents", "__builtins__", "__subclasses__", "modules",
                       "_getframe", "settrace", "setprofile", "addaudithook", "__dict__", "__mro__", "__bases__",
                       "sys"}
CONCURRENCY_ATTRS = {"jit", "futures", "fork"}  # torch.jit.fork / torch.futures run calls on other threads
INTROSPECTION_CALLS = {"globals", "locals", "vars", "__import__", "eval", "exec", "compile", "breakpoint"}
STREAM_ATTRS = {"Stream", "stream", "set_stream", "ExternalStream", "StreamContext"}
LOW_PRECISION = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2"}


@dataclass
class StaticReport:
    verdicts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    syntax_error: str = ""

    def add(self, kind: str, detail: str) -> None:
        code = f"{kind}:{detail}"
        if code not in self.verdicts:
            self.verdicts.append(code)

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


class _Checker(ast.NodeVisitor):
    def __init__(self, report: StaticReport) -> None:
        self.r = report

    def _module(self, name: str) -> None:
        for prefix in (name, ".".join(name.split(".")[:2]), name.split(".")[0]):
            if prefix in BANNED_MODULES:
                self.r.add(BANNED_MODULES[prefix], f"import {name}")
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name)
            self._private(alias.name)

    def _private(self, dotted: str) -> None:
        parts = dotted.split(".")
        if parts[0] in PRIVATE_ROOTS | {"torch", "triton"} and any(p.startswith("_") and not p.startswith("__")
                                                                  for p in parts[1:]):
            self.r.add("private_api", dotted)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._module(node.module or "")
        for alias in node.names:
            self._private(f"{node.module or ''}.{alias.name}")
        if node.level:
            self.r.add("introspection", "relative import")
        for alias in node.names:
            if alias.name == "Model":
                self.r.add("reference_call", "imports Model")
            if (node.module or "") == "os" and alias.name in OS_SPAWN | EXIT_CALLS:
                self.r.add("exit_call" if alias.name in EXIT_CALLS else "process_spawn", f"from os import {alias.name}")

    def _patch_target(self, target: ast.AST, how: str) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)) and _root_name(target) in PATCHABLE_ROOTS:
            self.r.add("monkey_patch", f"{how} {_dotted(target) or _root_name(target)}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                self._patch_target(el, "assigns")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._patch_target(node.target, "assigns")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._patch_target(t, "deletes")
        self.generic_visit(node)

    def visit_Try(self, node: ast.AST) -> None:
        self.r.add("try_except", f"line {node.lineno}")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            dotted = _dotted(base)
            if dotted.endswith("Tensor") or dotted in ("TorchDispatchMode", "TorchFunctionMode"):
                self.r.add("tensor_subclass", f"class {node.name}({dotted})")
            if dotted == "Model":
                self.r.add("reference_call", f"class {node.name}(Model)")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in (
                "__torch_dispatch__", "__torch_function__"
            ):
                self.r.add("tensor_subclass", f"{node.name}.{item.name}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "Model":
            self.r.add("reference_call", f"uses Model (line {node.lineno})")
        if node.id == "__builtins__":
            self.r.add("introspection", "__builtins__")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = _root_name(node)
        dotted = _dotted(node) or node.attr
        if node.attr in INTROSPECTION_ATTRS:
            self.r.add("introspection", node.attr)
        if node.attr in STREAM_ATTRS and ("cuda" in dotted.split(".") or root == "torch"):
            self.r.add("side_stream", dotted)
        if node.attr in OS_SPAWN:
            self.r.add("process_spawn", dotted)
        if node.attr in EXIT_CALLS:
            self.r.add("exit_call", dotted)
        if root in ("torch", "np", "numpy") and node.attr in CONCURRENCY_ATTRS:
            self.r.add("concurrency", dotted)
        if node.attr == "numpy":
            self.r.add("host_compute", f"{dotted}() (compute on the host)")
        if root in PRIVATE_ROOTS and node.attr.startswith("_") and not node.attr.startswith("__"):
            self.r.add("private_api", dotted)
        if node.attr == "allow_tf32":
            self.r.warn("TF32 switch: fp32 tasks are checked at fp32 tolerance")
        if node.attr in LOW_PRECISION:
            self.r.warn(f"reduced precision ({node.attr}) on an fp32 task fails the fp32 tolerance")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in EXIT_CALLS:
                self.r.add("exit_call", f"{func.id}()")
            if func.id in INTROSPECTION_CALLS:
                self.r.add("introspection", f"{func.id}()")
            if func.id in ("setattr", "delattr") and node.args and _root_name(node.args[0]) in PATCHABLE_ROOTS:
                self.r.add("monkey_patch", f"{func.id}({_dotted(node.args[0]) or _root_name(node.args[0])}, ...)")
            if func.id == "type" and len(node.args) == 3:
                self.r.add("introspection", "type(name, bases, namespace) builds a class unseen")
        elif isinstance(func, ast.Attribute):
            if func.attr == "forward" and isinstance(func.value, ast.Call) and _dotted(func.value.func) == "super":
                self.r.add("reference_call", "super().forward")
            if func.attr in ("half", "bfloat16"):
                self.r.warn(f".{func.attr}() downcast fails the fp32 tolerance on fp32 tasks")
        self.generic_visit(node)


def parse_candidate(code: str) -> ast.Module:
    """The candidate's syntax tree, without the warnings its odd literals (e.g. "\\l" in a plain string: a
    SyntaxWarning from Python 3.12, a DeprecationWarning before) would print into the judge's log, or raise where
    warnings are errors: they say nothing about the verdict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(code)


def check_source(code: str) -> StaticReport:
    """Static verdicts and warnings for `code` (see the module docstring for the policy)."""
    report = StaticReport()
    try:
        tree = parse_candidate(code)
    except SyntaxError as exc:
        report.syntax_error = f"SyntaxError: {exc.msg} (line {exc.lineno})"
        return report
    _Checker(report).visit(tree)
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree)):
        report.syntax_error = "no `class ModelNew` defined: the candidate must define class ModelNew(nn.Module)"
    return report
