"""proxycomp.bench.kernels: options are checked before any GPU work, with one-line errors (the timing runs on the H200)."""
from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def bench_kernels():
    from proxycomp.bench import kernels

    return kernels


@pytest.mark.parametrize("parts", ["attention,warp", "", "embeding"])
def test_unknown_parts_are_refused_in_one_line(bench_kernels, monkeypatch, capsys, parts):
    monkeypatch.setattr(sys, "argv", ["bench_kernels.py", "--out", "x.json", "--parts", parts])
    with pytest.raises(SystemExit) as exit_info:
        bench_kernels.main()
    assert exit_info.value.code == 2
    assert "--parts: choose from attention, embedding, sweep" in capsys.readouterr().err.strip().splitlines()[-1]


def test_valid_parts_reach_the_gpu_check(bench_kernels, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_kernels.py", "--out", "x.json", "--parts", "embedding"])
    monkeypatch.setattr(bench_kernels.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench_kernels.main()
