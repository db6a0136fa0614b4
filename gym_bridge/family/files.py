"""A family on disk: its tasks as a task set (task files and splits.json) with solutions, broken variants, a
pretraining corpus and a manifest beside them, and a task's broken variants read back from beside it.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from proxycomp.errors import UserError

from ..tasks import SPLITS_FILE
from .broken import BROKEN_KINDS
from .generate import Family


def write_family(family: Family, out: Path) -> dict[str, Path]:
    """``out/tasks`` (task files and splits.json: a task set), ``out/solutions/<stem>.py`` beside it,
    ``out/broken/<stem>.<kind>.py``, ``out/corpus/<stem>.py`` (each train task followed by its solution: pretraining
    text, held-out tasks never) and ``out/family.json`` (seed, held-out ops, each task's composition)."""
    out = Path(out)
    folders = {name: out / name for name in ("tasks", "solutions", "broken", "corpus")}
    if (folders["tasks"] / SPLITS_FILE).exists():
        raise UserError(f"{out} already holds a task family; choose another folder")
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    for task in family.tasks:
        (folders["tasks"] / f"{task.stem}.py").write_text(task.source)
        (folders["solutions"] / f"{task.stem}.py").write_text(task.solution)
        for kind, code in task.broken.items():
            (folders["broken"] / f"{task.stem}.{kind}.py").write_text(code)
        if task.split == "train":
            (folders["corpus"] / f"{task.stem}.py").write_text(f"{task.source}\n\n{task.solution}")
    splits = {name: [t.stem for t in family.split(name)] for name in ("train", "heldout")}
    (folders["tasks"] / SPLITS_FILE).write_text(json.dumps(splits, indent=1) + "\n")
    manifest = {"seed": family.seed, "heldout_ops": list(family.heldout_ops),
                "tasks": [{"stem": t.stem, "split": t.split, "bucket": t.bucket, **asdict(t.composition),
                           "broken": sorted(t.broken),
                           "changes": {kind: [s.op for s in c.steps] for kind, c in t.changes.items()}}
                          for t in family.tasks]}
    (out / "family.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return folders


def read_buckets(tasks_folder: Path) -> dict[str, str]:
    """Each generated task's bucket by stem, from the manifest beside a family's ``tasks/`` folder; empty for a task
    set that is not a generated family (or one written before buckets were recorded)."""
    path = Path(tasks_folder).parent / "family.json"
    if not path.is_file():
        return {}
    try:
        tasks = json.loads(path.read_text())["tasks"]
        return {t["stem"]: t["bucket"] for t in tasks if "bucket" in t}
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a task family manifest ({type(err).__name__}: {err}); regenerate the family "
                        "with `proxycomp gym generate` or remove the file") from None


def read_broken(task_path: Path) -> dict[str, str]:
    """The broken variants written beside a generated task (``../broken/<stem>.<kind>.py``), by kind."""
    folder = Path(task_path).parent.parent / "broken"
    stem = Path(task_path).stem
    return {kind: path.read_text() for kind in BROKEN_KINDS if (path := folder / f"{stem}.{kind}.py").is_file()}
