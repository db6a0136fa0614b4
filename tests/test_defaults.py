"""Each shared default is written once, in proxycomp/defaults.py, and asked everywhere else: the package sources
hold none of its literals outside that home."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxycomp import defaults

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "proxycomp" / "defaults.py"
SOURCES = sorted(p for folder in ("proxycomp", "gym_bridge", "kernels", "tools") for p in (ROOT / folder).rglob("*.py"))
LITERALS = {  # each default's literal, as code writes it (prose that names a value is left alone)
    "precision": r"""["'](bf16-mixed|32-true)["']""",
    "device": r"torch\.cuda\.is_available\(\)\s+else\b",
    "gradient clip": r"""\b(grad_clip|gradient_clip_val)["']?\s*(:\s*\w+\s*)?[:=]\s*[\d.]""",
    "SentencePiece size": r"spm_vocab_size\b.*\b8192\b",
    "eval stride": r"max\(1,\s*[\w.]*seq_len\s*//\s*2\)",
}


def _lines(path: Path, pattern: str) -> list[str]:
    found = re.compile(pattern, re.IGNORECASE).search
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if found(line)]


@pytest.mark.parametrize("name", LITERALS)
def test_written_only_at_home(name):
    assert _lines(HOME, LITERALS[name]), f"the {name} pattern misses its own home"
    elsewhere = [hit for path in SOURCES if path != HOME for hit in _lines(path, LITERALS[name])]
    assert not elsewhere, f"the {name} default is written outside proxycomp/defaults.py:\n" + "\n".join(elsewhere)


def test_the_values():
    assert (defaults.GRAD_CLIP, defaults.SPM_VOCAB_SIZE) == (1.0, 8192)
    assert defaults.default_precision("cuda") == "bf16-mixed" and defaults.default_precision("cpu") == "32-true"
    assert [defaults.default_stride(n) for n in (1, 2, 5, 2048)] == [1, 1, 2, 1024]
