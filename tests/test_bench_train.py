"""proxycomp.bench.train: the tiny preset runs every arm and the data pipeline on CPU; bad options fail in one line."""
from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def bench_train():
    from proxycomp.bench import train

    return train


@pytest.mark.slow
def test_tiny_preset_measures_every_arm_and_records(bench_train, tmp_path, monkeypatch, capsys):
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text(f"# Benchmarks\n\n{bench_train.SECTION}\n\nnotes\n\n## Later section\n\nkept\n")
    monkeypatch.setattr(bench_train, "BENCHMARKS", benchmarks)
    out = tmp_path / "train.json"

    assert bench_train.main(["--sizes", "tiny", "--out", str(out), "--record"]) == 0

    report = json.loads(out.read_text())
    assert [r["arm"] for r in report["arms"]] == [arm.name for arm in bench_train.ARMS]
    for r in report["arms"]:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["mfu"] > 0 and r["flops_per_symbol"] > 0
    assert report["matmul_flops"] > 0
    assert [row["view"] for row in report["data"]] == list(bench_train.DATA_VIEWS)
    assert all(row["symbols_per_s"] > 0 and row["cores_needed"]["d64"] > 0 for row in report["data"])

    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    assert printed[-1].startswith("| d64 | plain-graphs | ")  # the throughput table comes last
    assert printed[-len(bench_train.ARMS) - 2].startswith("| model | arm | tokens/s |")

    text = benchmarks.read_text()
    block_at, later_at = text.index("`python tools/bench_train.py --sizes tiny"), text.index("## Later section")
    assert text.index("notes") < block_at < text.index("| d64 | plain-graphs |") < later_at
    assert text.endswith("## Later section\n\nkept\n")


def test_profile_writes_each_arms_top_kernels(bench_train, tmp_path):
    arms = "fit-triton,plain"
    assert bench_train.main(["--sizes", "tiny", "--arms", arms, "--profile", str(tmp_path / "prof")]) == 0
    for arm in arms.split(","):
        text = (tmp_path / "prof" / f"d64_{arm}.txt").read_text()
        assert text.startswith("window ") and "of the window" in text
        assert "aten::" in text  # the op table itself, not just the header
        trace = json.loads((tmp_path / "prof" / f"d64_{arm}.trace.json").read_text())
        assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])


def test_spm_windows_train_the_proxy_vocabulary_on_the_real_stream(bench_train, tmp_path):
    out = tmp_path / "spm.json"
    assert bench_train.main(["--sizes", "tiny", "--windows", "spm", "--arms", "fit-triton,plain", "--out",
                             str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["windows"] == "spm"
    assert all(r["windows"] == "spm" and r["vocab_size"] == 320 + 512 for r in report["arms"])  # tiny spm: 512
    assert 0 < report["causal_work"]["d64"] <= 1  # 64-symbol windows: most hold one document


def test_causal_work_is_the_share_of_causal_pairs_inside_documents(bench_train):
    from proxycomp.vocab import Vocabulary
    doc_ids = torch.tensor([[0, 0, 1, 1, 1, 1], [5, 5, 5, 5, 5, 5]])  # 3 + 10 of 21 pairs; all 21
    work = bench_train.Workload("raw", Vocabulary(), [{"doc_ids": doc_ids}])
    assert work.causal_work() == pytest.approx((13 / 21 + 1) / 2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "tiny", "--arms", "fit-triton,warp"], "--arms: unknown warp; choose from fit-triton"),
        (["--sizes", "tiny", "--models", "d768"], "--models: unknown d768; choose from d64"),
        (["--sizes", "tiny", "--arms", ","], "--arms: unknown empty list"),
        (["--sizes", "tiny", "--warmup", "0"], "--warmup must be >= 1"),
        (["--sizes", "tiny", "--steps", "0"], "--steps >= 1"),
        (["--sizes", "tiny", "--out", "/no/such/folder/x.json"], "folder /no/such/folder does not exist"),
        (["--sizes", "huge"], "invalid choice: 'huge'"),
        (["--sizes", "tiny", "--windows", "zstd"], "invalid choice: 'zstd'"),
        (["--sizes", "tiny", "--profile", "p", "--record"], "--profile and --record"),
    ],
)
def test_bad_options_exit_with_one_line(bench_train, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench_train.main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error
