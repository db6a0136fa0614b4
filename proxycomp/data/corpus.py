"""Corpus loading: documents from a source, deduplicated, size-filtered and split train/val by a stable hash.

Sources: ``folder`` (files matching one or more globs, minus excluded names), ``jsonl`` and ``parquet`` (a text
column), ``hf`` (a local `datasets` dataset or data file, never the hub) and ``python-sources`` (the running
interpreter's stdlib and site-packages ``.py`` files, split by top-level package so validation packages are
unseen). Files of `exclude_packages` (this project by default) are never read by either file source. The held-out
set is a share of the documents, or a corpus of its own (`val_path`, an HF `val_split`).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import importlib.util
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from proxycomp.errors import UserError

SOURCES = ("python-sources", "folder", "jsonl", "parquet", "hf")
InvalidUtf8 = Literal["error", "skip"]


class CorpusError(UserError):
    """Bad corpus input; the message names the file (and line or field) and what to do."""


@dataclass(frozen=True)
class Document:
    name: str  # path or "file:line", for messages and manifests
    group: str  # split unit: the top-level package for python-sources, the name otherwise
    data: bytes


# What a source yields: a document and its size (a file outside the size range is counted, not read).
_Candidate = tuple[Document, int]


@dataclass
class CorpusReport:
    """Counts and bytes at each filter, for logs and the run manifest."""

    excluded: int = 0  # files of exclude_packages, left out before reading
    seen: int = 0
    seen_bytes: int = 0
    too_small: int = 0
    too_large: int = 0
    invalid_utf8: int = 0
    duplicates: int = 0
    duplicate_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0
    train: int = 0
    train_bytes: int = 0
    val: int = 0
    val_bytes: int = 0
    val_groups: list[str] = field(default_factory=list)
    val_source: str = ""  # where a held-out set of its own came from; empty: a share of the documents
    train_digest: str = ""  # of the train documents in order: the same settings can read other files elsewhere

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        mb = 1e6
        return (
            f"corpus: {self.kept} documents kept ({self.kept_bytes / mb:.1f} MB) of {self.seen} seen; left out "
            f"{self.excluded} files of exclude_packages; dropped "
            f"{self.duplicates} duplicates ({self.duplicate_bytes / mb:.1f} MB), {self.too_small} too small, "
            f"{self.too_large} too large, {self.invalid_utf8} non-UTF-8; train {self.train} "
            f"({self.train_bytes / mb:.1f} MB), val {self.val} ({self.val_bytes / mb:.1f} MB, "
            + (f"from {self.val_source})" if self.val_source else f"{len(self.val_groups)} groups)")
        )


@dataclass(frozen=True)
class Corpus:
    train: list[Document]
    val: list[Document]
    report: CorpusReport


def stable_hash(text: str, seed: int = 0) -> int:
    """A hash that is the same in every process and Python version (unlike `hash`)."""
    digest = hashlib.blake2b(f"{seed}:{text}".encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class CorpusConfig:
    """Where the documents come from and which of them are kept.

    Args:
        source: python-sources (this interpreter's own .py files; reads no path), folder, jsonl, parquet or hf
            (a local `datasets` folder or data file, never the hub)
        path: the file or folder a folder, jsonl, parquet or hf source reads
        glob: the files a folder source reads: one pattern or a list, e.g. ["**/*.py", "**/*.rs"] (quote each:
            YAML reads a bare * as an alias)
        exclude: files a folder source skips: a pattern without / matches any file or folder name on the way
            (node_modules, *.min.js), one with / the path below data.corpus.path (tests/fixtures/*); null: none
        exclude_packages: import packages the folder and python-sources sources never read: a file is left out
            when a folder on its way below the root has the package's name (site/proxycomp/...), or when its real
            path (symlinks followed) lies in a folder the package is imported or installed from. Default: this
            project, whose tasks, solutions and task-family code are what the RL policy is evaluated on
        text_field: the text column of jsonl, parquet and hf records
        min_bytes: shorter documents are dropped
        max_bytes: longer documents are dropped
        max_documents: keep at most this many (a deterministic sample in stable-hash order), in train and in a
            held-out corpus of its own each; null: all
        val_fraction: share of the kept bytes held out for validation, by whole groups (packages for
            python-sources, documents otherwise); unused when val_path or val_split names a held-out corpus
        on_invalid_utf8: error or skip a document that is not UTF-8 (a binary or latin-1 file); null: skip for
            python-sources, error otherwise
        split: the split of an hf dataset to train on
        val_path: a held-out corpus of its own, read like path (same source, glob, exclude and text_field)
        val_split: the split of an hf dataset to hold out (e.g. validation or test), read from val_path or path
    """

    source: str = "python-sources"
    path: str | None = None
    glob: str | tuple[str, ...] = "**/*.py"
    exclude: str | tuple[str, ...] | None = None
    exclude_packages: tuple[str, ...] = ("proxycomp",)
    text_field: str = "text"
    min_bytes: int = 200
    max_bytes: int = 200_000
    max_documents: int | None = None
    val_fraction: float = 0.05
    on_invalid_utf8: InvalidUtf8 | None = None
    split: str = "train"
    val_path: str | None = None
    val_split: str | None = None

    def __post_init__(self) -> None:
        for name in ("glob", "exclude"):  # one pattern or several; YAML and JSON give lists
            value = getattr(self, name)
            patterns = (value,) if isinstance(value, str) else tuple(value or ())
            if any(p.startswith("[") for p in patterns):
                raise CorpusError(f"data.corpus.{name} {value!r} looks like a list YAML could not read (a bare * "
                                  'starts a YAML alias); quote each pattern: ["**/*.py", "**/*.rs"]')
            object.__setattr__(self, name, value if isinstance(value, str) or value is None else patterns)
        if isinstance(self.exclude_packages, str):
            raise CorpusError(f"data.corpus.exclude_packages must be a list of package names, got "
                              f"{self.exclude_packages!r}; write [{self.exclude_packages}]")
        object.__setattr__(self, "exclude_packages", tuple(self.exclude_packages))  # YAML and JSON give lists
        bad = [name for name in self.exclude_packages if not name.isidentifier()]
        if bad:
            raise CorpusError(f"data.corpus.exclude_packages: {bad[0]!r} is not a top-level package name "
                              "(an identifier, e.g. proxycomp)")
        if self.source not in SOURCES:
            raise CorpusError(f"unknown corpus source {self.source!r}; known: {', '.join(SOURCES)}")
        if self.source == "python-sources" and (self.path or self.val_path):
            field = "data.corpus.path" if self.path else "data.corpus.val_path"
            raise CorpusError(f"{field} is set but data.corpus.source is python-sources, which reads this "
                              "interpreter's own files; set data.corpus.source to folder, jsonl, parquet or hf")
        if self.val_split is not None and self.source != "hf":
            raise CorpusError(f"data.corpus.val_split names a split of an hf dataset; a {self.source} source holds "
                              "out data.corpus.val_path or a data.corpus.val_fraction share")
        if not 0.0 < self.val_fraction < 1.0:
            raise CorpusError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        if not 0 <= self.min_bytes <= self.max_bytes:
            raise CorpusError(f"need 0 <= min_bytes <= max_bytes, got min_bytes={self.min_bytes}, "
                              f"max_bytes={self.max_bytes}")
        if self.max_documents is not None and self.max_documents < 2:
            raise CorpusError(f"max_documents must be at least 2 (one train, one val document), "
                              f"got {self.max_documents}")
        if self.on_invalid_utf8 not in (None, "error", "skip"):
            raise CorpusError(f"on_invalid_utf8 must be 'error' or 'skip', got {self.on_invalid_utf8!r}")


def load_corpus(config: CorpusConfig = CorpusConfig(), seed: int = 0) -> Corpus:
    """Read, filter, deduplicate and split a corpus.

    With `max_documents`, candidates are visited in stable-hash order of their names and reading stops once that
    many are kept, so a capped corpus is a deterministic sample without reading everything. A held-out corpus of
    its own (`val_path`, `val_split`) is read after the train one; its documents that also occur in train are
    dropped as duplicates.
    """
    c = config
    report = CorpusReport()
    hashes: set[bytes] = set()
    where = f"{c.source} {c.path}" if c.path else c.source
    kept = _read_kept(c, c.path, c.split, seed, report, hashes, where, "data.corpus.path")
    if c.val_path is None and c.val_split is None:
        train, val = _split(kept, c.val_fraction, seed, where, report)
    else:
        val_path, val_split = c.val_path or c.path, c.val_split or c.split
        report.val_source = f"{val_path}" + (f" split {val_split}" if c.source == "hf" else "")
        train, val = kept, _read_kept(c, val_path, val_split, seed, report, hashes, f"held-out {report.val_source}",
                                      "data.corpus.val_path" if c.val_path else "data.corpus.path")
    report.kept, report.kept_bytes = len(train) + len(val), sum(len(d.data) for d in train + val)
    report.train, report.train_bytes = len(train), sum(len(d.data) for d in train)
    digest = hashlib.blake2b(digest_size=16)
    for doc in train:
        digest.update(len(doc.data).to_bytes(8, "little") + doc.data)
    report.train_digest = digest.hexdigest()
    report.val, report.val_bytes = len(val), sum(len(d.data) for d in val)
    return Corpus(train, val, report)


def _read_kept(c: CorpusConfig, path: str | None, split: str, seed: int, report: CorpusReport, hashes: set[bytes],
               where: str, field: str) -> list[Document]:
    """The documents of one source (`path`, set by the config's `field`) that pass the size, UTF-8 and duplicate
    filters (counted in `report`)."""
    policy = c.on_invalid_utf8 or ("skip" if c.source == "python-sources" else "error")
    kept: list[Document] = []
    counts = dataclasses.replace(report)  # this read's own counts, for the message when nothing is kept
    for doc, size in _read_source(c, path, split, seed, field, report):
        report.seen += 1
        report.seen_bytes += size
        if size < c.min_bytes:
            report.too_small += 1
            continue
        if size > c.max_bytes:
            report.too_large += 1
            continue
        try:
            doc.data.decode("utf-8")
        except UnicodeDecodeError as err:
            if policy == "error":
                raise CorpusError(
                    f"{doc.name}: not valid UTF-8 at byte {err.start}; fix the file, exclude it "
                    "(data.corpus.exclude) or skip such files with --data.corpus.on_invalid_utf8 skip"
                ) from None
            report.invalid_utf8 += 1
            continue
        digest = hashlib.blake2b(doc.data, digest_size=16).digest()
        if digest in hashes:
            report.duplicates += 1
            report.duplicate_bytes += size
            continue
        hashes.add(digest)
        kept.append(doc)
        if c.max_documents is not None and len(kept) >= c.max_documents:
            break
    if not kept:
        excluded, seen, small, large, dup, bad = (
            getattr(report, k) - getattr(counts, k)
            for k in ("excluded", "seen", "too_small", "too_large", "duplicates", "invalid_utf8"))
        raise CorpusError(
            f"corpus {where} is empty after filtering ({excluded} files of exclude_packages left out, {seen} seen, "
            f"{small} under min_bytes={c.min_bytes}, {large} over max_bytes={c.max_bytes}, {dup} duplicates, {bad} "
            "non-UTF-8); check path/glob, exclude_packages or the size limits"
        )
    return kept


def _split(docs: list[Document], val_fraction: float, seed: int, where: str, report: CorpusReport):
    """Whole groups go to val in stable-hash order while they fit in `val_fraction` of the bytes.

    Filling by bytes (not by a hash threshold on group count) keeps the split near the requested size even
    when groups differ a lot in size, as packages do; groups that would overshoot stay in train.
    """
    group_bytes: dict[str, int] = {}
    for d in docs:
        group_bytes[d.group] = group_bytes.get(d.group, 0) + len(d.data)
    if len(group_bytes) < 2:
        raise CorpusError(f"corpus {where} has a single split group ({next(iter(group_bytes))!r}); add documents")
    target = val_fraction * sum(group_bytes.values())
    order = sorted(group_bytes, key=lambda g: stable_hash(g, seed))
    val_groups: set[str] = set()
    val_bytes = 0
    for group in order:
        if val_bytes + group_bytes[group] <= target:
            val_groups.add(group)
            val_bytes += group_bytes[group]
    if not val_groups:  # every group is larger than the target: take the smallest one
        val_groups.add(min(order, key=group_bytes.__getitem__))
    report.val_groups = sorted(val_groups)
    return [d for d in docs if d.group not in val_groups], [d for d in docs if d.group in val_groups]


def _read_source(c: CorpusConfig, path: str | None, split: str, seed: int, field: str,
                 report: CorpusReport) -> Iterator[_Candidate]:
    if c.source == "python-sources":
        files = _without_packages(_python_source_files(), c.exclude_packages, report)
        yield from _read_files(files, c.min_bytes, c.max_bytes, c.max_documents, seed)
        return
    if not path:
        raise CorpusError(f"corpus source {c.source!r} needs {field} (a {_what_it_reads(c.source)})")
    root = Path(path)
    if not root.exists():
        raise CorpusError(f"{field} {path} does not exist; set it to an existing {_what_it_reads(c.source)}")
    if c.source == "folder":
        if not root.is_dir():
            raise CorpusError(f"{field} {path} is not a folder; the folder source reads files matching "
                              "data.corpus.glob")
        files = _matching_files(root, c.glob, c.exclude)
        if not files:
            raise CorpusError(f"no file in {path} matches glob {c.glob!r}"
                              + (f" outside exclude {c.exclude!r}" if c.exclude else "") + "; set data.corpus.glob")
        files = _without_packages(files, c.exclude_packages, report)
        yield from _read_files(files, c.min_bytes, c.max_bytes, c.max_documents, seed)
    elif c.source == "jsonl":
        for file in _data_files(root, "jsonl"):
            yield from _read_jsonl(file, c.text_field)
    elif c.source == "parquet":
        for file in _data_files(root, "parquet"):
            yield from _read_parquet(file, c.text_field)
    else:
        yield from _read_hf(root, c.text_field, split)


def _what_it_reads(source: str) -> str:
    return "folder" if source == "folder" else f"{source} file or folder"


def _matching_files(root: Path, globs: str | tuple[str, ...],
                    exclude: str | tuple[str, ...] | None) -> list[tuple[str, Path, str]]:
    """(name, path, group) of every file under `root` that a glob matches and no exclude pattern does."""
    exclude = (exclude,) if isinstance(exclude, str) else exclude or ()

    def excluded(rel: str) -> bool:
        return any(fnmatch.fnmatch(rel, p) if "/" in p else any(fnmatch.fnmatch(part, p) for part in rel.split("/"))
                   for p in exclude)

    files = {}
    for pattern in (globs,) if isinstance(globs, str) else globs:
        for file in root.glob(pattern):
            rel = file.relative_to(root).as_posix()
            if file.is_file() and not excluded(rel):
                files[rel] = file
    return [(rel, file, rel) for rel, file in files.items()]


def _without_packages(files: list[tuple[str, Path, str]], packages: tuple[str, ...],
                      report: CorpusReport) -> list[tuple[str, Path, str]]:
    """`files` (name, path, group) less those of `packages` (CorpusConfig.exclude_packages), counted in `report`.

    By name: a folder of the package's name on the way below the root, as in site-packages or a copy of it made of
    links (`cp -rs`). By real path: a file that resolves into a folder the package is imported or installed from,
    whatever the links to it are called.
    """
    if not packages:
        return files
    names, folders = set(packages), _package_folders(packages)
    real_dirs: dict[str, str] = {}

    def real_path(file: Path) -> str:
        # realpath stats every component of its argument: once per folder here, not once per file (17,000 files
        # of python-sources took a second), and the file itself only when it is a link.
        path = os.fspath(file)
        if os.path.islink(path):
            return os.path.realpath(path)
        folder, base = os.path.split(path)
        if folder not in real_dirs:
            real_dirs[folder] = os.path.realpath(folder)
        return os.path.join(real_dirs[folder], base)

    def excluded(name: str, file: Path) -> bool:
        if names.intersection(name.split("/")[:-1]):
            return True
        real = real_path(file)
        return any(real.startswith(folder) for folder in folders)

    kept = [f for f in files if not excluded(f[0], f[1])]
    report.excluded += len(files) - len(kept)
    return kept


def _package_folders(packages: tuple[str, ...]) -> tuple[str, ...]:
    """The real paths (each ending in a separator) of the folders `packages` are imported from (their import specs:
    a checkout on sys.path shadows an installed copy) and installed in (site-packages)."""
    paths = sysconfig.get_paths()
    folders = set()
    for name in packages:
        candidates = [Path(paths[key]) / name for key in ("purelib", "platlib")]
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # a broken install, or a module without a spec: the names still count
            spec = None
        candidates += [Path(p) for p in (spec.submodule_search_locations or ())] if spec is not None else []
        folders.update(os.path.join(os.path.realpath(p), "") for p in candidates if p.is_dir())
    return tuple(sorted(folders))


def _data_files(root: Path, ext: str) -> list[Path]:
    if root.is_file():
        return [root]
    files = sorted(root.glob(f"**/*.{ext}"))
    if not files:
        raise CorpusError(f"no *.{ext} file under {root}; set data.corpus.path to a .{ext} file or a folder "
                          "holding some")
    return files


def _python_source_files() -> list[tuple[str, Path, str]]:
    """(name, path, group) for every .py file of the stdlib and site-packages, grouped by top-level package."""
    paths = sysconfig.get_paths()
    roots: dict[Path, str] = {}
    for key, label in (("stdlib", "stdlib"), ("purelib", "site"), ("platlib", "site")):
        root = Path(paths[key]).resolve()
        if root.is_dir() and root not in roots:
            roots[root] = label
    files = []
    for root, label in roots.items():
        for dirpath, dirnames, filenames in os.walk(root):
            # site-packages may sit inside the stdlib folder; it is walked as its own root
            dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
            rel_dir = Path(dirpath).relative_to(root)
            for name in sorted(filenames):
                if name.endswith(".py"):
                    rel = rel_dir / name
                    top = rel.parts[0].removesuffix(".py")
                    files.append((f"{label}/{rel}", Path(dirpath) / name, f"{label}/{top}"))
    return files


def _read_files(files, min_bytes, max_bytes, max_documents, seed) -> Iterator[_Candidate]:
    # Sizes come from stat so out-of-range files are counted without being read.
    if max_documents is not None:
        files = sorted(files, key=lambda f: stable_hash(f[0], seed))
    else:
        files = sorted(files)
    for name, file, group in files:
        try:
            size = file.stat().st_size
            data = file.read_bytes() if min_bytes <= size <= max_bytes else b""
        except OSError as err:
            raise CorpusError(f"{file}: cannot be read ({err.strerror})") from None
        yield Document(name, group, data), size


def _read_jsonl(file: Path, text_field: str) -> Iterator[_Candidate]:
    with file.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise CorpusError(f"{file}:{lineno}: not a JSON object ({err.msg}); fix or remove the line") from None
            if not isinstance(record, dict) or text_field not in record:
                raise CorpusError(f"{file}:{lineno}: no field {text_field!r}; set data.corpus.text_field to the "
                                  "text's key")
            name = f"{file}:{lineno}"
            yield _candidate(name, _text_bytes(record[text_field], name, text_field))


def _read_parquet(file: Path, text_field: str) -> Iterator[_Candidate]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(file)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a non-parquet file
        raise CorpusError(f"{file}: not a readable parquet file ({err})") from None
    columns = table.schema_arrow.names
    if text_field not in columns:
        raise CorpusError(f"{file}: no column {text_field!r} (columns: {', '.join(columns)}); "
                          "set data.corpus.text_field")
    row = 0
    for batch in table.iter_batches(columns=[text_field]):
        for value in batch.column(0).to_pylist():
            name = f"{file}:{row}"
            row += 1
            yield _candidate(name, _text_bytes(value, name, text_field))


# `datasets` builders for one data file given as an hf path, by suffix.
HF_FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}


def _read_hf(root: Path, text_field: str, split: str) -> Iterator[_Candidate]:
    # Offline before `datasets` is imported: a local path must never turn into a hub request.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    if root.is_file() and root.suffix not in HF_FILE_BUILDERS:
        raise CorpusError(f"{root}: the hf source reads a save_to_disk folder, a folder of data files or one "
                          f"{'/'.join(HF_FILE_BUILDERS)} file, not a {root.suffix or 'suffix-less'} file")
    try:
        if root.is_file():
            data = datasets.load_dataset(HF_FILE_BUILDERS[root.suffix], data_files=str(root))
        elif (root / "dataset_info.json").exists() or (root / "dataset_dict.json").exists():
            data = datasets.load_from_disk(str(root))
        else:
            data = datasets.load_dataset(str(root))
    except Exception as err:  # noqa: BLE001 - `datasets` raises many types for a folder it cannot read
        reason = " ".join(str(err).split()) or type(err).__name__
        raise CorpusError(f"{root}: `datasets` cannot read it ({reason}); point data.corpus.path at a save_to_disk "
                          "folder, a folder of data files or one data file") from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            if split != "train" or len(data) != 1:
                raise CorpusError(f"{root}: no split {split!r} (splits: {', '.join(data)}); set data.corpus.split "
                                  "(or data.corpus.val_split for the held-out one)")
            split = next(iter(data))  # the one split of a dataset saved without a train split
        data = data[split]
    elif split != "train":
        raise CorpusError(f"{root}: a single dataset without splits, so split {split!r} does not exist; hold out "
                          "data.corpus.val_path or a data.corpus.val_fraction share instead")
    if text_field not in data.column_names:
        raise CorpusError(f"{root}: no column {text_field!r} (columns: {', '.join(data.column_names)}); "
                          "set data.corpus.text_field")
    for row, value in enumerate(data[text_field]):
        name = f"{root}:{row}"
        yield _candidate(name, _text_bytes(value, name, text_field))


def _candidate(name: str, data: bytes) -> _Candidate:
    return Document(name, name, data), len(data)


def _text_bytes(value, name: str, text_field: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        # JSON may carry lone surrogates; keep them as bytes so the UTF-8 check reports the document.
        return value.encode("utf-8", errors="surrogatepass")
    raise CorpusError(f"{name}: field {text_field!r} holds {type(value).__name__}, expected a string")


