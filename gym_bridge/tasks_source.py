"""Resolve a task spec (registered name or task file path) to its name and source text."""
from __future__ import annotations

from .tasks import TaskError, load_task


def resolve_task(spec: str) -> tuple[str, str]:
    """(name, source) for a registered task name or a path to a KernelBench-format task file."""
    try:
        task = load_task(spec)
    except TaskError as exc:
        raise ValueError(f"task {spec!r}: {exc}") from None
    return task.name, task.source
