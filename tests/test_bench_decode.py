"""tools/bench_decode.py on CPU: a tiny model through both CPU decode loops, which must draw the same symbols."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "bench_decode.py"


def test_tiny_model_decodes_alike_in_both_cpu_loops(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(TOOL), "--d_model", "64", "--layers", "2", "--batch", "3",
                           "--prompt", "40", "--new", "12", "--modes", "dynamic,static", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["dynamic", "static"]
    assert all(r["same_as_dynamic"] and r["ms_per_symbol"] > 0 for r in rows)
    assert "| static |" in done.stdout


def test_modes_must_start_with_the_baseline():
    done = subprocess.run([sys.executable, str(TOOL), "--modes", "graph"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--modes" in done.stderr
