"""The shipped gym tasks (KernelBench format plus per-size shapes), a user's task file, and task sets.

A task file defines `class Model(nn.Module)`, `get_inputs(size="gpu")` and `get_init_inputs(size="gpu")`,
plus the module constants `CATEGORY` and `SIZES` (keys "cpu", "gpu", "gpu_heldout"). A plain KernelBench file
without those constants also loads: its category is "custom" and its sizes are empty, meaning
`get_inputs()` takes no size argument (the sizes "cpu" and "gpu" both judge its own shapes; "gpu_heldout" needs
SIZES). Files are read with `ast`, never imported here, so listing the
tasks stays cheap and a broken task cannot run code at listing time.

A task set is a folder of task files (a KernelBench level folder, or any folder of such files). An optional
`splits.json` beside them names disjoint splits by task stem, e.g. {"train": [...], "heldout": [...]}: RL trains on
one split and is evaluated on another. Solutions, where a set has them, sit in a `solutions` folder beside the task
folder, one `<stem>.py` each (the layout of the shipped tasks and of `proxycomp gym generate`). `draw_tasks` takes a
seeded subset of a split across its categories, for an evaluation on a budget.
"""
from __future__ import annotations

import ast
import difflib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from proxycomp.errors import UserError

from ..config import SIZES

TASKS_DIR = Path(str(resources.files(__name__)))
SOLUTIONS_DIR = Path(str(resources.files("proxycomp.gym_bridge.solutions")))
SPLITS_FILE = "splits.json"
CATEGORIES = ("elementwise", "reduction", "norm", "loss", "scan", "matmul_fusion", "conv_pool")
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
CUSTOM_CATEGORY = "custom"


class TaskError(UserError):
    """A task name or task file that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Task:
    name: str
    path: Path
    category: str
    sizes: tuple[str, ...]

    @property
    def source(self) -> str:
        """The task file's text (what a policy sees as the reference)."""
        return self.path.read_text()

    @property
    def solution_path(self) -> Path | None:
        """The reference Triton solution, `<stem>.py` in the `solutions` folder beside the task's folder: a shipped
        task's, or a generated family's (`proxycomp gym generate`); None where there is none."""
        folder = SOLUTIONS_DIR if self.path.parent == TASKS_DIR else self.path.parent.parent / "solutions"
        path = folder / f"{self.name}.py"
        return path if path.is_file() else None


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names[node.target.id] = node.value
    return names


def _parse_task(path: Path) -> Task:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as err:
        raise TaskError(f"task file {path}: syntax error at line {err.lineno}: {err.msg}") from None
    names = _top_level_names(tree)
    missing = [name for name in REQUIRED_NAMES if name not in names]
    if missing:
        raise TaskError(
            f"task file {path} lacks {', '.join(missing)}: a task defines class Model(nn.Module), "
            "get_inputs() and get_init_inputs() (KernelBench format)"
        )

    category = CUSTOM_CATEGORY
    if "CATEGORY" in names:
        node = names["CATEGORY"]
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value):
            raise TaskError(f"task file {path}: CATEGORY must be a string literal, e.g. CATEGORY = \"reduction\"")
        category = node.value

    sizes: tuple[str, ...] = ()
    if "SIZES" in names:
        node = names["SIZES"]
        keys = node.keys if isinstance(node, ast.Dict) else []
        if not (
            isinstance(node, ast.Dict)
            and keys
            and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys)
        ):
            raise TaskError(
                f"task file {path}: SIZES must be a dict literal keyed by size name, "
                f"e.g. SIZES = {{\"cpu\": dict(dim=300), ...}} with keys from {SIZES}"
            )
        sizes = tuple(k.value for k in keys)  # type: ignore[union-attr]
    return Task(name=path.stem, path=path.resolve(), category=category, sizes=sizes)


def list_tasks() -> list[Task]:
    """Every shipped task, sorted by name."""
    return [_parse_task(path) for path in sorted(TASKS_DIR.glob("*.py")) if path.name != "__init__.py"]


def load_task(name_or_path: str | Path) -> Task:
    """A shipped task by name (e.g. "relu") or a user's task file by path."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".py") or "/" in text or "\\" in text:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise TaskError(f"task file {path} does not exist: pass a shipped task name or a path to a .py file")
        return _parse_task(path)
    shipped = {task.name: task for task in list_tasks()}
    if text in shipped:
        return shipped[text]
    close = difflib.get_close_matches(text, shipped, n=3, cutoff=0.5)
    hint = f"close matches: {', '.join(close)}" if close else f"shipped tasks: {', '.join(shipped)}"
    raise TaskError(f"unknown task {text!r}; {hint} (or pass a path to a task .py file)")


@dataclass(frozen=True)
class TaskSet:
    """The task files of one folder, by stem, and its named splits (every task is in "all")."""

    root: Path
    tasks: dict[str, Task]
    splits: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def split(self, name: str) -> list[Task]:
        """The tasks of split `name` ("all": every task), in file-name order."""
        if name == "all":
            return list(self.tasks.values())
        if name not in self.splits:
            known = ", ".join(["all", *self.splits])
            raise TaskError(f"task set {self.root} has no split {name!r}; its splits: {known} ({SPLITS_FILE})")
        return [self.tasks[stem] for stem in self.splits[name]]


def load_task_set(folder: str | Path) -> TaskSet:
    """Every task file in `folder` (not recursive) and the splits of its `splits.json`, checked: a split names only
    tasks of the folder, and no task is in two splits."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise TaskError(f"task set {root} is not a folder of KernelBench-format task files")
    tasks = {p.stem: _parse_task(p) for p in sorted(root.glob("*.py")) if p.name != "__init__.py"}
    if not tasks:
        raise TaskError(f"task set {root} holds no .py task file")
    splits: dict[str, tuple[str, ...]] = {}
    path = root / SPLITS_FILE
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
        except ValueError as err:
            raise TaskError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
            raise TaskError(f"{path}: expected {{split name: [task stems]}}")
        seen: dict[str, str] = {}
        for name, stems in raw.items():
            unknown = [s for s in stems if s not in tasks]
            if unknown or name == "all":
                what = f"names tasks that are not in the folder: {', '.join(map(str, unknown[:5]))}" if unknown \
                    else "'all' is every task; choose another split name"
                raise TaskError(f"{path}: split {name!r} {what}")
            for stem in stems:
                if stem in seen:
                    raise TaskError(f"{path}: task {stem!r} is in both {seen[stem]!r} and {name!r}")
                seen[stem] = name
            splits[name] = tuple(stems)
    return TaskSet(root.resolve(), tasks, splits)


def draw_tasks(tasks: Sequence[Task], n: int | None, seed: int) -> list[Task]:
    """`n` of `tasks` spread over their categories (a generated family's templates): each category's tasks shuffled
    by `seed`, then taken in turn, one per category, so a budget cut keeps every category (the tasks in file-name
    order when n covers them all)."""
    if n is None or n >= len(tasks):
        return list(tasks)
    rng = random.Random(f"evaluated:{seed}")
    by_category: dict[str, list[Task]] = {}
    for task in tasks:
        by_category.setdefault(task.category, []).append(task)
    queues = [rng.sample(group, len(group)) for _, group in sorted(by_category.items())]
    drawn = [queue[i] for i in range(max(map(len, queues))) for queue in queues if i < len(queue)][:n]
    return sorted(drawn, key=lambda task: task.name)
