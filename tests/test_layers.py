"""The package's layers, read from the imports of its source files (every import, at any depth in a file).

- kernels/ (proxycomp.kernels) imports nothing of proxycomp but itself.
- the gym environment (gym_bridge/ except its command line and the bridge) imports nothing of proxycomp but itself
  and the floor: proxycomp.errors, the one error base that every layer may raise, and proxycomp.defaults;
- the bridge (gym_bridge/policy.py, gym_bridge/rl/) may import both sides; nothing in the environment imports it;
- no import circle anywhere in the package; no __path__ manipulation.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = {"proxycomp": ROOT / "proxycomp", "proxycomp.kernels": ROOT / "kernels",
         "proxycomp.gym_bridge": ROOT / "gym_bridge"}
FLOOR = {"proxycomp.errors", "proxycomp.defaults"}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (shipped task and solution files are data, not modules)."""
    found = {}
    for package, root in TREES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            if rel.parts[0] in ("tasks", "solutions") and rel.name != "__init__":
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The package modules `name` imports (absolute and relative, anywhere in the file)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from x import y`: y is a module of x, or a name defined in x
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `from x import name` names a module or an attribute
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _bridge(name: str) -> bool:
    return name == "proxycomp.gym_bridge.policy" or name.startswith("proxycomp.gym_bridge.rl")


def test_the_package_is_read():
    assert {"proxycomp.lit", "proxycomp.kernels.attention", "proxycomp.gym_bridge.pool",
            "proxycomp.gym_bridge.rl.trainer"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("proxycomp.kernels")))
def test_kernels_import_only_themselves(name):
    assert not {m for m in GRAPH[name] if not m.startswith("proxycomp.kernels")}


ENVIRONMENT = sorted(n for n in MODULES if n.startswith("proxycomp.gym_bridge") and not _bridge(n)
                     and n != "proxycomp.gym_bridge.cli")


@pytest.mark.parametrize("name", ENVIRONMENT)
def test_the_gym_environment_imports_only_itself(name):
    outside = {m for m in GRAPH[name] if m not in FLOOR and (not m.startswith("proxycomp.gym_bridge") or _bridge(m)
                                                             or m == "proxycomp.gym_bridge.cli")}
    assert not outside, f"{name} imports {sorted(outside)}"


@pytest.mark.parametrize("name", sorted(FLOOR))
def test_the_floor_imports_nothing(name):
    assert not GRAPH[name]


def test_no_import_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(GRAPH[name]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt] if nxt in path else [name, nxt]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_no_path_manipulation():
    for path in MODULES.values():
        assert "__path__" not in path.read_text(), path
