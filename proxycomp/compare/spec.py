"""The settings of one comparison (`CompareSpec`), read by `proxycomp compare` from a preset and flags."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from proxycomp.compare.arms import MODEL_SIZES, SIZE_LR, CompareError
from proxycomp.compare.budget import Budget
from proxycomp.config_diff import changed_fields
from proxycomp.data.corpus import CorpusConfig
from proxycomp.defaults import SPM_VOCAB_SIZE, default_stride

PRESETS = resources.files("proxycomp.recipes") / "baselines"
# Fields that change how fast a comparison runs, not what it measures: a results folder may be resumed
# with other values.
EXECUTION_FIELDS = ("attn_backend", "compile", "eval_batch_size", "cpu_threads")


@dataclass
class CompareSpec:
    """One comparison: every arm trains the same model size at the same budget, and is scored alike.

    Flat by design, not a `DataConfig` and an `OptimConfig` inside: the arms' data settings differ in views, schedule,
    dropped views and stream seed, which the comparison sets per arm and per training seed, so a composed `data` would
    hold fields a preset must not set; what every arm shares is listed here once, and `Comparison.fit_config` builds
    each arm's `proxycomp fit` config from it (the generated fit.yaml is what the arm trains through `proxycomp fit`'s
    own CLI, and what a reader reruns it with).

    Args:
        model_size: tiny (CPU smoke), small (d 256, 6 layers) or base (d 512, 8 layers)
        attn_backend: sdpa, triton or flash_attn
        compile: torch.compile each arm's model with its loss
        precision: Lightning precision; null: bf16-mixed on a GPU, 32-true on CPU
        cpu_threads: torch threads on a CPU-only machine (1 avoids oversubscribing busy cores); null: torch's
        lr: peak learning rate of every arm; null: the model size's (SIZE_LR in proxycomp.compare.arms says why)
        lr_warmup_frac: warmup as a share of each arm's steps
        budget: compute per arm, in the unit of `match`
        match: what every arm spends alike: flops (a larger vocabulary's head costs steps) or symbols (the same
            steps for every arm, as the paper); the table reports both figures
        seq_len: symbols per training window
        batch_size: windows per step
        corpus: the documents every arm reads
        spm_vocab_size: pieces of the one SentencePiece model the spm arms share
        spm_train_bytes: train bytes the SentencePiece model learns from
        num_workers: DataLoader workers per arm
        seed: corpus split and tokenizer sample, shared by every run (the training seeds are `--seeds`)
        curve_points: validation points per arm, evenly spaced in steps
        curve_max_bytes: held-out bytes scored at each curve point
        eval_max_bytes: held-out bytes of the final score; null: the whole split
        eval_stride: sliding-window step of the scores; null: seq_len / 2
        eval_batch_size: rows per scoring forward
        perturb_rate: share of characters deleted for the stability and perturbed-bpb figures
        stats_documents: documents of the compressor statistics
        stats_max_doc_bytes: longest document of the stability figure (the exact edit distance is quadratic)
    """

    model_size: str = "tiny"
    attn_backend: str = "sdpa"
    compile: bool = False
    precision: str | None = None
    cpu_threads: int | None = None
    lr: float | None = None
    lr_warmup_frac: float = 0.02
    budget: float = 2e15
    match: str = "flops"
    seq_len: int = 256
    batch_size: int = 8
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    spm_vocab_size: int = SPM_VOCAB_SIZE
    spm_train_bytes: int = 20_000_000
    num_workers: int = 2
    seed: int = 0
    curve_points: int = 8
    curve_max_bytes: int = 200_000
    eval_max_bytes: int | None = 4_000_000
    eval_stride: int | None = None
    eval_batch_size: int = 8
    perturb_rate: float = 0.1
    stats_documents: int = 32
    stats_max_doc_bytes: int = 16_384

    def __post_init__(self) -> None:
        if isinstance(self.corpus, dict):  # from a results file
            self.corpus = CorpusConfig(**self.corpus)
        if self.model_size not in MODEL_SIZES:
            raise CompareError(f"model_size must be one of {', '.join(MODEL_SIZES)}, got {self.model_size!r}")
        Budget(self.budget, self.match)
        if self.lr is not None and not self.lr > 0:
            raise CompareError(f"lr must be positive, got {self.lr}")
        for name in ("seq_len", "batch_size", "curve_points", "curve_max_bytes", "eval_batch_size", "stats_documents"):
            if getattr(self, name) < 1:
                raise CompareError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.perturb_rate < 1.0 or not 0.0 <= self.lr_warmup_frac < 1.0:
            raise CompareError("perturb_rate and lr_warmup_frac must lie in [0, 1)")

    @property
    def model(self) -> dict[str, int]:
        return dict(MODEL_SIZES[self.model_size])

    @property
    def peak_lr(self) -> float:
        return self.lr or SIZE_LR[self.model_size]

    @property
    def stride(self) -> int:
        return self.eval_stride or default_stride(self.seq_len)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def differences(self, saved: dict[str, Any]) -> list[str]:
        """Fields (outside EXECUTION_FIELDS) whose value differs from a saved spec, as dotted names."""
        return changed_fields(saved, json.loads(json.dumps(self.to_dict())), EXECUTION_FIELDS)


def preset_path(name: str) -> Path:
    """A shipped preset by name (NAME.yaml among proxycomp.recipes' baselines) or a YAML file by path."""
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        path = Path(str(PRESETS / f"{name}.yaml"))
    if not path.is_file():
        known = ", ".join(sorted(p.name.removesuffix(".yaml") for p in PRESETS.iterdir() if p.name.endswith(".yaml")))
        raise CompareError(f"--preset {name}: no file {path}; known presets: {known}")
    return path
