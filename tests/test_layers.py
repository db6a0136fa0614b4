"""The package's layers, the README's table, read from the imports of its source files (every import, at any depth
in a file; a module imported by name, `importlib.import_module("...")` or the dispatcher's `_delegate("...")`,
counts as an import of it).

- the floor (errors, files, command, defaults) imports only the floor;
- kernels/ (proxycomp.kernels) imports nothing of proxycomp but itself;
- the core (the rest of proxycomp/) imports only itself, the kernels and the floor;
- the gym environment (gym_bridge/ except the bridge) imports only itself and the floor;
- the bridge (gym_bridge/policy.py, gym_bridge/rl/, gym_bridge/cli.py) may import every layer but the roof;
- the roof, the `proxycomp` dispatcher (proxycomp/cli.py), may import every layer, and no module imports it;
- no import circle anywhere in the package; no __path__ manipulation.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = {"proxycomp": ROOT / "proxycomp", "proxycomp.kernels": ROOT / "kernels",
         "proxycomp.gym_bridge": ROOT / "gym_bridge"}
FLOOR = {"proxycomp.errors", "proxycomp.files", "proxycomp.command", "proxycomp.defaults"}
ROOF = "proxycomp.cli"
BY_NAME = {("importlib", "import_module"), (None, "import_module"), (None, "_delegate")}  # (module, function)


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
        elif isinstance(node, ast.Call) and _called(node.func) in BY_NAME and node.args:
            targets = [_literal_prefix(node.args[0])]
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


def _called(func: ast.expr) -> tuple[str | None, str] | None:
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id, func.attr
    return None


def _literal_prefix(arg: ast.expr) -> str:
    """The module a name argument spells, or the package its f-string's literal start names (`f"pkg.{x}"`: pkg)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return arg.values[0].value.rstrip(".")
    return ""


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> str:
    """The README row `name` stands in."""
    if name in FLOOR:
        return "floor"
    if name == ROOF:
        return "roof"
    if name.startswith("proxycomp.kernels"):
        return "kernels"
    if (name in ("proxycomp.gym_bridge.policy", "proxycomp.gym_bridge.cli")
            or name.startswith("proxycomp.gym_bridge.rl")):
        return "bridge"
    if name.startswith("proxycomp.gym_bridge"):
        return "gym environment"
    return "core"


MAY_IMPORT = {"floor": {"floor"}, "kernels": {"kernels"}, "core": {"core", "kernels", "floor"},
              "gym environment": {"gym environment", "floor"},
              "bridge": {"bridge", "core", "gym environment", "kernels", "floor"},
              "roof": {"floor", "kernels", "core", "gym environment", "bridge"}}


def test_the_package_is_read():
    assert {"proxycomp.lit", "proxycomp.kernels.attention", "proxycomp.gym_bridge.pool",
            "proxycomp.gym_bridge.rl.trainer", ROOF, *FLOOR} <= set(MODULES)


def test_imports_by_name_are_read():
    assert {"proxycomp.gym_bridge.cli", "proxycomp.gym_bridge.rl.cli", "proxycomp.compare.cli"} <= GRAPH[ROOF]
    assert "proxycomp.kernels" in GRAPH["proxycomp.model"]  # importlib.import_module(f"proxycomp.kernels.{module}")


def test_every_row_of_the_readme_table_is_checked():
    layout = (ROOT / "README.md").read_text().split("\n## Layout\n", 1)[1].split("\n\n")[1]
    rows = [line.split("|")[1].strip() for line in layout.splitlines()[2:]]
    assert rows == list(MAY_IMPORT)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_only_what_its_layer_may(name):
    layer = _layer(name)
    outside = sorted(m for m in GRAPH[name] if _layer(m) not in MAY_IMPORT[layer])
    assert not outside, f"{name} ({layer}) imports {[(m, _layer(m)) for m in outside]}"


def test_no_package_module_imports_the_dispatcher():
    assert not sorted(name for name, imported in GRAPH.items() if ROOF in imported)


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
