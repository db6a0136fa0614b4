"""What tuning costs the language model: the policy's bits per byte on code it was not pretrained on, for the --ckpt
model, before RL (after the warm start) and after RL.

A warm start of a few hundred steps on a few dozen kernel examples teaches a small model those kernels and can cost
it most of what it knew of other code (docs/rl.md measures it); the gym's rewards cannot show that, this figure does.
It is `proxycomp eval-bpb`'s: raw bytes, windows of the model's max_seq_len, stride half of it.
"""
from __future__ import annotations

import json
from pathlib import Path

from proxycomp.defaults import default_stride
from proxycomp.files import write_atomic
from proxycomp.model import Transformer
from proxycomp.scoring import read_documents, score_documents

CODE_BPB_FILE = "code_bpb.json"


def default_code_files() -> str:
    """proxycomp's own core sources: not among the interpreter's files that `python-sources` reads when the package
    is installed editable (`make install`); a policy pretrained elsewhere should name its own held-out files."""
    import proxycomp

    return str(Path(proxycomp.__file__).parent)


def code_documents(files: str | None, budget: int) -> list[bytes]:
    """Whole files of `files` (a file, a folder's *.py files or a glob; null: `default_code_files`), in path order,
    until they hold `budget` bytes."""
    documents, total = [], 0
    for document in read_documents(files or default_code_files(), flag="evaluation.code_files"):
        if total >= budget:
            break
        documents.append(document)
        total += len(document)
    return documents


class CodeBpb:
    """The figures of one model by phase, kept in OUT/code_bpb.json (a resumed run keeps those measured before)."""

    def __init__(self, model: Transformer, out_dir: Path, documents: list[bytes], what: str, keep: bool) -> None:
        self.model, self.path, self.documents, self.what = model, out_dir / CODE_BPB_FILE, documents, what
        self.figures: dict[str, float] = json.loads(self.path.read_text()) if keep and self.path.is_file() else {}

    @classmethod
    def of_files(cls, files: str | None, budget: int, model: Transformer, out_dir: Path, keep: bool) -> CodeBpb:
        """Figures on `code_documents(files, budget)`; a `budget` of 0 measures nothing."""
        documents = code_documents(files, budget) if budget else []
        return cls(model, out_dir, documents, f"{files or 'proxycomp/ (its own sources)'}, "
                                              f"{sum(map(len, documents)) / 1000:.0f} kB", keep)

    def measure(self, phase: str) -> None:
        if not self.documents:
            return
        seq_len = self.model.config.max_seq_len
        bpb = score_documents(self.model, self.documents, seq_len, default_stride(seq_len)).bits_per_byte
        self.figures[phase] = bpb
        write_atomic(self.path, json.dumps(self.figures, indent=1))
        print(f"bits per byte on {self.what}, {phase}: {bpb:.3f}", flush=True)

    def table(self) -> str:
        lines = [f"| phase | bits per byte on {self.what} |", "|---|---|"]
        return "\n".join(lines + [f"| {phase} | {bpb:.3f} |" for phase, bpb in self.figures.items()])
