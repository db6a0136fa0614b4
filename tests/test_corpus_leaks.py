"""The policy's pretraining corpus holds no evaluation answer. The corpus is built as recipes/pretrain/h200_policy.yaml
builds it (a folder of links to site-packages, with this project installed in it, and to a generated family's
corpus/), read by the corpus loader, and its documents and lines are hashed into a manifest that no shipped task or
solution, no held-out task or solution of the family and no task-family source may be found in."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from proxycomp.data import CorpusConfig, load_corpus
from proxycomp.gym_bridge.family.files import write_family
from proxycomp.gym_bridge.family.generate import generate_family
from proxycomp.gym_bridge.family.ops import OPS

# The installed layout (setup.py's package_dir): the subtrees sit inside proxycomp/ once installed.
INSTALLED = {"proxycomp": "proxycomp", "proxycomp.gym_bridge": "proxycomp/gym_bridge",
             "proxycomp.kernels": "proxycomp/kernels", "proxycomp.recipes": "proxycomp/recipes"}


def folder_of(package: str) -> Path:
    return Path(importlib.util.find_spec(package).submodule_search_locations[0])


def link_tree(src: Path, dst: Path) -> None:
    """`cp -rs src dst`: real folders, a link for each file."""
    for file in src.rglob("*"):
        if file.is_file() and "__pycache__" not in file.parts:
            link = dst / file.relative_to(src)
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(file)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lines_of(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(corpus folder, family, evaluation texts by name, text a policy may train on)."""
    root = tmp_path_factory.mktemp("leaks")
    site = root / "site-packages"
    for package, where in INSTALLED.items():
        link_tree(folder_of(package), site / where)
    family = generate_family(30, seed=0)
    write_family(family, root / "family")
    corpus = root / "pc"
    link_tree(site, corpus / "site")
    link_tree(root / "family" / "corpus", corpus / "family")
    gym = folder_of("proxycomp.gym_bridge")
    evaluation = {f"shipped {p.parent.name}/{p.name}": p.read_text()
                  for p in sorted((gym / "solutions").glob("*.py")) + sorted((gym / "tasks").glob("*.py"))
                  if p.name != "__init__.py"}
    evaluation |= {f"family code {p.name}": p.read_text() for p in sorted((gym / "family").glob("*.py"))}
    for task in family.split("heldout"):
        evaluation |= {f"held-out task {task.stem}": task.source, f"held-out solution {task.stem}": task.solution}
    allowed = "\n".join(f"{t.source}\n\n{t.solution}" for t in family.split("train"))
    return corpus, family, evaluation, allowed


def manifest(corpus: Path, **overrides) -> dict[str, dict[str, str]]:
    """sha256 of every document and of every stripped line of the corpus the recipe's settings read."""
    c = load_corpus(CorpusConfig("folder", str(corpus), glob="**/*.py", on_invalid_utf8="skip", **overrides))
    documents = {sha(d.data.decode()): d.name for d in c.train + c.val}
    lines = {sha(line): d.name for d in c.train + c.val for line in lines_of(d.data.decode())}
    return {"documents": documents, "lines": lines, "texts": {d.name: d.data.decode() for d in c.train + c.val}}


def leaks(found: dict, family, evaluation: dict[str, str], allowed: str) -> list[str]:
    """What of the evaluation text the manifest holds: whole files, their Triton lines that no train task has, and
    the held-out ops' Triton statements as the op catalogue writes them."""
    out = [f"{name} whole, as {found['documents'][sha(text)]}" for name, text in evaluation.items()
           if sha(text) in found["documents"]]
    trainable = lines_of(allowed)
    for name, text in evaluation.items():
        distinctive = {line for line in lines_of(text) if "tl." in line and line not in trainable}
        out += [f"{name}: line {line!r} in {found['lines'][sha(line)]}" for line in sorted(distinctive)
                if sha(line) in found["lines"]]
    statements = {line for op in family.heldout_ops for line in OPS[op].triton.splitlines()}
    out += [f"held-out op statement {line!r} in {doc}" for line in sorted(statements)
            for doc, text in found["texts"].items() if line in text]
    return out


def test_the_policy_corpus_holds_no_evaluation_text(setup):
    corpus, family, evaluation, allowed = setup
    found = manifest(corpus)
    assert leaks(found, family, evaluation, allowed) == []
    assert any(name.startswith("family/") for name in found["texts"])  # the train split stays in
    assert not any("proxycomp" in Path(name).parts for name in found["texts"])


def test_the_check_finds_the_leak_when_the_project_is_read(setup):
    """Without the exclusion the same corpus holds the shipped solutions, the family code and held-out ops' lines:
    the check above is not empty by construction."""
    corpus, family, evaluation, allowed = setup
    found = leaks(manifest(corpus, exclude_packages=[]), family, evaluation, allowed)
    assert any(f.startswith("shipped solutions/relu.py whole") for f in found)
    assert any(f.startswith("family code ops.py whole") for f in found)
    assert any(f.startswith("held-out op statement") for f in found)
