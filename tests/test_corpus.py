"""Corpus sources, filters, deduplication, the stable split, the report, and every input error."""
from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from proxycomp.data import CorpusConfig, CorpusError, load_corpus
from proxycomp.data.corpus import CorpusReport, _without_packages


def text(i: int, size: int = 300) -> str:
    return (f"# document {i}\n" + "x = 1\n" * size)[:size]


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "src"
    for i in range(30):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"f{i}.py").write_text(text(i))
    (root / "d0" / "copy.py").write_text(text(5))  # duplicate content
    (root / "d0" / "tiny.py").write_text("x = 1\n")  # under min_bytes
    (root / "d0" / "huge.py").write_text(text(99, 5000))  # over max_bytes
    (root / "d0" / "notes.txt").write_text(text(98))  # not matched by the glob
    return root


def test_folder_filters_deduplicates_and_reports(folder):
    c = load_corpus(CorpusConfig("folder", str(folder), min_bytes=200, max_bytes=1000, val_fraction=0.2))
    r = c.report
    assert (r.seen, r.kept, r.duplicates, r.too_small, r.too_large) == (33, 30, 1, 1, 1)
    assert r.duplicate_bytes == 300 and r.kept_bytes == 30 * 300
    assert r.train + r.val == 30 and r.train_bytes + r.val_bytes == r.kept_bytes
    assert 0 < r.val <= 6  # 20% of the bytes at most, at least one group
    names = {d.name for d in c.train} | {d.name for d in c.val}
    assert len(names) == 30 and not {d.name for d in c.train} & {d.name for d in c.val}
    assert "30 documents kept" in r.summary()


def test_split_is_deterministic_and_seed_dependent(folder):
    def val_names(seed):
        config = CorpusConfig("folder", str(folder), max_bytes=1000, val_fraction=0.3)
        return sorted(d.name for d in load_corpus(config, seed=seed).val)

    assert val_names(0) == val_names(0)
    assert any(val_names(0) != val_names(s) for s in (1, 2, 3))


def test_max_documents_is_a_deterministic_sample(folder):
    a = load_corpus(CorpusConfig("folder", str(folder), max_bytes=1000, max_documents=10))
    b = load_corpus(CorpusConfig("folder", str(folder), max_bytes=1000, max_documents=10))
    assert a.report.kept == 10 and [d.name for d in a.train] == [d.name for d in b.train]


def test_invalid_utf8_errors_by_default_and_is_counted_when_skipped(folder):
    (folder / "d1" / "latin1.py").write_bytes(b"caf\xe9 = 1\n" * 40)
    with pytest.raises(CorpusError,
                       match=r"d1/latin1.py: not valid UTF-8 at byte 3; .*--data.corpus.on_invalid_utf8 skip"):
        load_corpus(CorpusConfig("folder", str(folder), max_bytes=1000))
    c = load_corpus(CorpusConfig("folder", str(folder), max_bytes=1000, on_invalid_utf8="skip"))
    assert c.report.invalid_utf8 == 1 and c.report.kept == 30


def test_jsonl_and_its_errors(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps({"content": text(i)}) for i in range(10)) + "\n")
    c = load_corpus(CorpusConfig("jsonl", str(good), text_field="content"))
    assert c.report.kept == 10 and c.train[0].name.startswith(str(good))
    with pytest.raises(CorpusError, match=r"good.jsonl:1: no field 'text'; set data.corpus.text_field"):
        load_corpus(CorpusConfig("jsonl", str(good)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": text(1)}) + "\n{not json\n")
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not a JSON object"):
        load_corpus(CorpusConfig("jsonl", str(bad)))
    typed = tmp_path / "typed.jsonl"
    typed.write_text(json.dumps({"text": 5}) + "\n")
    with pytest.raises(CorpusError, match=r"typed.jsonl:1: field 'text' holds int"):
        load_corpus(CorpusConfig("jsonl", str(typed)))


def test_parquet_and_missing_column(tmp_path):
    pq.write_table(pa.table({"text": [text(i) for i in range(10)], "n": list(range(10))}), tmp_path / "a.parquet")
    assert load_corpus(CorpusConfig("parquet", str(tmp_path))).report.kept == 10
    with pytest.raises(CorpusError, match=r"a.parquet: no column 'body' \(columns: text, n\)"):
        load_corpus(CorpusConfig("parquet", str(tmp_path / "a.parquet"), text_field="body"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"no \*.parquet file under"):
        load_corpus(CorpusConfig("parquet", str(tmp_path / "empty")))
    (tmp_path / "empty" / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match=r"broken.parquet: not a readable parquet file"):
        load_corpus(CorpusConfig("parquet", str(tmp_path / "empty")))


def test_a_repository_of_several_languages_with_excludes_and_undecodable_files(tmp_path):
    root = tmp_path / "repo"
    for i, rel in enumerate(("src/a.py", "src/b.rs", "src/c.go", "node_modules/lib/d.py", "tests/fixtures/e.py",
                             "tests/f.py", "web/app.min.js", "web/app.js", "README.md")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text(i))
    (root / "src" / "logo.py").write_bytes(bytes(range(256)) * 2)  # binary under a source name
    (root / "src" / "old.rs").write_bytes(b"// caf\xe9\n" * 40)  # latin-1
    config = CorpusConfig("folder", str(root), glob=["**/*.py", "**/*.rs", "**/*.go", "**/*.js"],
                          exclude=["node_modules", "*.min.js", "tests/fixtures/*"], on_invalid_utf8="skip")
    c = load_corpus(config)
    names = sorted(d.name for d in c.train + c.val)
    assert names == ["src/a.py", "src/b.rs", "src/c.go", "tests/f.py", "web/app.js"]
    assert c.report.invalid_utf8 == 2 and "2 non-UTF-8" in c.report.summary()
    assert load_corpus(CorpusConfig("folder", str(root), glob="web/*.js")).report.kept == 2  # one pattern, as before


def test_exclude_packages_leaves_out_a_package_by_folder_name_and_by_real_path(tmp_path, monkeypatch):
    """A package's files are left out under its own name (site-packages, a `cp -rs` copy of it) and through a link of
    another name into where it is imported from; by default the package left out is this project."""
    imported = tmp_path / "importable" / "answers"
    imported.mkdir(parents=True)
    (imported / "__init__.py").write_text(text(100))
    (imported / "solution.py").write_text(text(101))
    monkeypatch.syspath_prepend(str(tmp_path / "importable"))
    root = tmp_path / "corpus"
    for i in range(4):
        (root / "site" / "other").mkdir(parents=True, exist_ok=True)
        (root / "site" / "other" / f"m{i}.py").write_text(text(i))
    (root / "site" / "answers").mkdir()
    (root / "site" / "answers" / "old_copy.py").write_text(text(102))  # by name, though no import reads it
    (root / "renamed.py").symlink_to(imported / "solution.py")  # by real path
    config = CorpusConfig("folder", str(root), exclude_packages=["answers"])
    c = load_corpus(config)
    assert sorted(d.name for d in c.train + c.val) == [f"site/other/m{i}.py" for i in range(4)]
    assert c.report.excluded == 2 and "left out 2 files of exclude_packages" in c.report.summary()
    assert load_corpus(dataclasses.replace(config, exclude_packages=[])).report.kept == 6
    # by real path through a linked folder on the way (a corpus root that is a link, say), the file itself no link
    (tmp_path / "vendored").symlink_to(imported, target_is_directory=True)
    files = [(name, tmp_path / "vendored" / name, name) for name in ("solution.py", "__init__.py")]
    files.append(("site/other/m0.py", root / "site" / "other" / "m0.py", "site/other"))
    report = CorpusReport()
    assert [f[0] for f in _without_packages(files, ("answers",), report)] == ["site/other/m0.py"]
    assert report.excluded == 2
    assert CorpusConfig().exclude_packages == ("proxycomp",)


def test_a_held_out_folder_of_its_own(folder, tmp_path):
    held_out = tmp_path / "held_out"
    held_out.mkdir()
    for i in range(3):
        (held_out / f"v{i}.py").write_text(text(100 + i))
    (held_out / "leak.py").write_text(text(7))  # also in train: dropped, not scored on
    c = load_corpus(CorpusConfig("folder", str(folder), max_bytes=1000, val_path=str(held_out)))
    assert sorted(d.name for d in c.val) == ["v0.py", "v1.py", "v2.py"]
    assert c.report.train == 30 and c.report.duplicates == 2 and f"from {held_out})" in c.report.summary()


@pytest.mark.slow
def test_hf_datasets_files_and_splits(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": [text(i) for i in range(10)]}).save_to_disk(str(tmp_path / "ds"))
    assert load_corpus(CorpusConfig("hf", str(tmp_path / "ds"))).report.kept == 10
    with pytest.raises(CorpusError, match=r"no column 'code' \(columns: text\)"):
        load_corpus(CorpusConfig("hf", str(tmp_path / "ds"), text_field="code"))
    with pytest.raises(CorpusError, match="a single dataset without splits"):
        load_corpus(CorpusConfig("hf", str(tmp_path / "ds"), val_split="validation"))
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": [text(i) for i in range(10)]}),
                                   "validation": datasets.Dataset.from_dict({"text": [text(50 + i) for i in range(3)]}),
                                   "test": datasets.Dataset.from_dict({"text": [text(80 + i) for i in range(2)]})})
    splits.save_to_disk(str(tmp_path / "dd"))
    c = load_corpus(CorpusConfig("hf", str(tmp_path / "dd"), val_split="validation"))
    assert (c.report.train, c.report.val) == (10, 3) and "split validation" in c.report.summary()
    assert load_corpus(CorpusConfig("hf", str(tmp_path / "dd"), split="test", val_split="validation")).report.train == 2
    with pytest.raises(CorpusError, match=r"no split 'dev' \(splits: train, validation, test\)"):
        load_corpus(CorpusConfig("hf", str(tmp_path / "dd"), val_split="dev"))
    pq.write_table(pa.table({"text": [text(i) for i in range(4)]}), tmp_path / "one.parquet")
    assert load_corpus(CorpusConfig("hf", str(tmp_path / "one.parquet"))).report.kept == 4  # a data file, not the hub
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CorpusError, match="not a .txt file"):
        load_corpus(CorpusConfig("hf", str(tmp_path / "notes.txt")))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CorpusError, match="`datasets` cannot read it"):
        load_corpus(CorpusConfig("hf", str(tmp_path / "nothing")))


def test_python_sources_split_by_package(tmp_path):
    c = load_corpus(CorpusConfig(max_documents=150, val_fraction=0.1))
    assert c.report.kept == 150 and c.report.val > 0
    val_groups = {d.group for d in c.val}
    assert val_groups == set(c.report.val_groups)
    assert not val_groups & {d.group for d in c.train}
    assert all(d.name.endswith(".py") and d.group.split("/")[0] in ("stdlib", "site") for d in c.train)


FOLDER = object()  # stands for the `folder` fixture's path in the table below


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(source="web"), "unknown corpus source 'web'; known: python-sources, folder, jsonl, parquet, hf"),
        (dict(source="folder"), "needs data.corpus.path"),
        (dict(source="folder", path="/no/such/dir"), "data.corpus.path /no/such/dir does not exist; set it to an "
                                                     "existing folder$"),
        (dict(source="jsonl", path="/no/such.jsonl"), "an existing jsonl file or folder$"),
        (dict(source="folder", path=FOLDER, val_path="/no/val"), "data.corpus.val_path /no/val does not exist"),
        (dict(source="folder", path=FOLDER, glob="*.rs"), "matches glob '\\*.rs'"),
        (dict(source="folder", path=FOLDER, min_bytes=10_000, max_bytes=20_000), "is empty after filtering"),
        (dict(source="folder", path=FOLDER, val_fraction=1.5), "val_fraction must be in"),
        (dict(source="folder", path=FOLDER, min_bytes=5, max_bytes=1), "min_bytes <= max_bytes"),
        (dict(source="folder", path=FOLDER, max_documents=1), "max_documents must be at least 2"),
        (dict(source="folder", path=FOLDER, on_invalid_utf8="ignore"), "on_invalid_utf8 must be"),
        (dict(source="folder", path=FOLDER, glob="[**/*.py, **/*.rs]"), "quote each pattern"),
        (dict(source="folder", path=FOLDER, exclude=("d0", "d1", "d2")), "outside exclude"),
        (dict(path=FOLDER), "data.corpus.path is set but data.corpus.source is python-sources"),
        (dict(val_path=FOLDER), "data.corpus.val_path is set but data.corpus.source is python-sources"),
        (dict(source="folder", path=FOLDER, val_split="validation"), "val_split names a split of an hf dataset"),
        (dict(exclude_packages="proxycomp"), r"must be a list of package names, .*write \[proxycomp\]"),
        (dict(exclude_packages=["proxycomp.gym_bridge"]), "'proxycomp.gym_bridge' is not a top-level package name"),
        (dict(source="folder", path=FOLDER, exclude_packages=["d0", "d1", "d2"]),
         "33 files of exclude_packages left out, 0 seen"),
    ],
)
def test_input_errors(folder, kwargs, message):
    kwargs = {k: str(folder) if v is FOLDER else v for k, v in kwargs.items()}
    with pytest.raises(CorpusError, match=message):
        load_corpus(CorpusConfig(**kwargs))


def test_a_single_group_cannot_be_split(tmp_path):
    (tmp_path / "one.py").write_text(text(1))
    with pytest.raises(CorpusError, match="single split group"):
        load_corpus(CorpusConfig("folder", str(tmp_path)))
