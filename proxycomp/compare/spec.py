"""The settings of one comparison (`CompareSpec`): defaults, presets from YAML, and command-line overrides."""
from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from proxycomp.compare.arms import MODEL_SIZES, CompareError
from proxycomp.compare.budget import Budget

PRESET_DIR = Path(__file__).resolve().parents[2] / "recipes" / "baselines"
# Fields that change how fast a comparison runs, not what it measures: a results folder may be resumed
# with other values.
EXECUTION_FIELDS = ("attn_backend", "compile", "eval_batch_size", "cpu_threads")


@dataclass
class CompareSpec:
    # model and optimizer (every arm alike)
    model_size: str = "tiny"
    attn_backend: str = "sdpa"
    compile: bool = False
    precision: str | None = None  # None: bf16-mixed on a GPU, 32-true on CPU
    cpu_threads: int | None = None  # torch threads on a CPU-only machine (1 avoids oversubscribing busy cores)
    lr: float = 1.5e-3
    lr_warmup_frac: float = 0.02  # of each arm's steps
    # compute
    budget: float = 2e15
    budget_unit: str = "flops"
    seq_len: int = 256
    batch_size: int = 8
    # corpus and views (ProxyDataModule's fields of the same names)
    source: str = "python-sources"
    path: str | None = None
    glob: str = "**/*.py"
    max_documents: int | None = None
    min_bytes: int = 200
    max_bytes: int = 200_000
    val_fraction: float = 0.05
    spm_vocab_size: int = 8192
    spm_train_bytes: int = 20_000_000
    num_workers: int = 2
    seed: int = 0
    # measurement
    curve_points: int = 8  # val points per arm, evenly spaced in steps
    curve_max_bytes: int = 200_000  # held-out bytes scored at each curve point
    eval_max_bytes: int | None = 4_000_000  # held-out bytes of the final score (None: the whole split)
    eval_stride: int | None = None  # None: seq_len // 2
    eval_batch_size: int = 8
    perturb_rate: float = 0.1  # share of characters deleted for the stability and perturbed-bpb figures
    stats_documents: int = 32
    stats_max_doc_bytes: int = 16_384  # exact edit distance is quadratic: stability reads documents up to this size

    def __post_init__(self) -> None:
        if self.model_size not in MODEL_SIZES:
            raise CompareError(f"model_size must be one of {', '.join(MODEL_SIZES)}, got {self.model_size!r}")
        Budget(self.budget, self.budget_unit)
        for name in ("seq_len", "batch_size", "curve_points", "curve_max_bytes", "eval_batch_size", "stats_documents"):
            if getattr(self, name) < 1:
                raise CompareError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.perturb_rate < 1.0 or not 0.0 <= self.lr_warmup_frac < 1.0:
            raise CompareError("perturb_rate and lr_warmup_frac must lie in [0, 1)")

    @property
    def model(self) -> dict[str, int]:
        return dict(MODEL_SIZES[self.model_size])

    @property
    def stride(self) -> int:
        return self.eval_stride or max(1, self.seq_len // 2)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def differences(self, saved: dict[str, Any]) -> list[str]:
        """Fields (outside EXECUTION_FIELDS) whose value differs from a saved spec."""
        return [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in self.to_dict().items()
                if k not in EXECUTION_FIELDS and saved.get(k) != v]


def preset_path(name: str) -> Path:
    """A preset by name (recipes/baselines/NAME.yaml) or by path."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return path
    return PRESET_DIR / f"{name}.yaml"


def load_preset(name: str) -> dict[str, Any]:
    path = preset_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise CompareError(f"--preset {name}: no file {path}; known presets: {known}")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise CompareError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(values, dict):
        raise CompareError(f"{path}: a preset is a mapping of CompareSpec fields, got {type(values).__name__}")
    check_fields(values, str(path))
    return values


def check_fields(values: dict[str, Any], where: str) -> None:
    known = {f.name for f in fields(CompareSpec)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise CompareError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def parse_assignment(text: str) -> tuple[str, Any]:
    """`FIELD=VALUE` from --set; the value is read as YAML (numbers, null, true/false) and type-checked."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise CompareError(f"--set {text!r}: expected FIELD=VALUE")
    check_fields({name: None}, "--set")
    value = yaml.safe_load(raw)
    hint = typing.get_type_hints(CompareSpec)[name]
    allowed = typing.get_args(hint) or (hint,)
    if isinstance(value, str) and float in allowed:
        try:  # YAML 1.1 reads "5e15" (no dot) as a string
            value = float(value)
        except ValueError:
            pass
    if type(value) is int and float in allowed:
        value = float(value)
    if not isinstance(value, tuple(t for t in allowed if isinstance(t, type))):
        raise CompareError(f"--set {name}={raw}: expected {hint}, got {type(value).__name__}")
    return name, value


def build_spec(preset: str | None, overrides: dict[str, Any]) -> CompareSpec:
    values = load_preset(preset) if preset else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return CompareSpec(**values)
    except TypeError as err:
        raise CompareError(f"comparison settings: {err}") from None
