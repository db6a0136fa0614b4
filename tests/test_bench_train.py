"""proxycomp.bench.train: the tiny preset runs every arm and the data pipeline on CPU; bad options fail in one line."""
from __future__ import annotations

import json

import numpy as np
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
    runnable = [arm.name for arm in bench_train.ARMS if torch.cuda.is_available() or not arm.needs_cuda]
    assert [r["arm"] for r in report["arms"]] == runnable
    assert "fit-triton-compile-embed" in runnable
    for r in report["arms"]:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["mfu"] > 0 and r["flops_per_symbol"] > 0
    assert report["matmul_flops"] > 0
    assert [row["view"] for row in report["data"]] == list(bench_train.DATA_VIEWS)
    assert all(row["symbols_per_s"] > 0 and row["cores_needed"]["d64"] > 0 for row in report["data"])

    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    assert printed[-1].startswith(f"| d64 | {runnable[-1]} | ")  # the throughput table comes last
    assert printed[-len(runnable) - 2].startswith("| model | arm | tokens/s |")

    text = benchmarks.read_text()
    block_at, later_at = text.index("`python tools/bench_train.py --sizes tiny"), text.index("## Later section")
    assert text.index("notes") < block_at < text.index(f"| d64 | {runnable[-1]} |") < later_at
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


def test_compiled_plain_arms_compile_the_loss_with_the_model(bench_train, monkeypatch):
    """As the fit arms do: an eager loss would leave the baseline's float32 passes over the logits uncompiled."""
    compiled = []

    def record(fn, **options):
        compiled.append(fn)
        return fn

    monkeypatch.setattr(torch, "compile", record)
    assert bench_train.main(["--sizes", "tiny", "--arms", "plain-compile"]) == 0
    (batch_loss,) = compiled
    size = bench_train.PRESETS["tiny"].models[0]
    batch = bench_train.synthetic_batches(size, np.array([size.seq_len // 2]), seed=0, count=1)[0]
    loss = batch_loss(batch)
    assert loss.ndim == 0 and loss.requires_grad  # the step's loss itself, not the logits


def test_spm_windows_train_the_proxy_vocabulary_on_the_real_stream(bench_train, tmp_path):
    out = tmp_path / "spm.json"
    assert bench_train.main(["--sizes", "tiny", "--windows", "spm", "--arms", "fit-triton,plain", "--out",
                             str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["windows"] == "spm"
    assert all(r["windows"] == "spm" and r["vocab_size"] == 320 + 512 for r in report["arms"])  # tiny spm: 512
    assert 0 < report["causal_work"]["d64"] <= 1  # 64-symbol windows: most hold one document


def test_doc_len_packs_documents_of_that_length(bench_train, tmp_path):
    out = tmp_path / "doc.json"
    assert bench_train.main(["--sizes", "tiny", "--doc_len", "16", "--arms", "fit-triton", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["doc_len"] == 16
    # 64-symbol windows of 16-symbol documents (the last cut by the window): 4 of them, 4 x 136 of 64 x 65 / 2 pairs
    assert report["causal_work"]["d64"] == pytest.approx(4 * 16 * 17 / (64 * 65), abs=0.02)


def test_each_timed_step_trains_on_a_batch_of_its_own_in_every_round(bench_train, monkeypatch, tmp_path):
    """A few batches replayed in turn made the share of attention inside documents a draw's (BENCHMARKS.md)."""
    made = []
    workload = bench_train.workload
    monkeypatch.setattr(bench_train, "workload", lambda *args: made.append(workload(*args)) or made[-1])
    out = tmp_path / "rounds.json"
    assert bench_train.main(["--sizes", "tiny", "--steps", "3", "--arms", "plain", "--rounds", "2",
                             "--out", str(out)]) == 0
    (work,) = made  # both rounds train on the same windows
    ids = [batch["input_ids"] for batch in work.batches]
    assert len(ids) == 3 and not any(torch.equal(a, b) for i, a in enumerate(ids) for b in ids[i + 1:])
    report = json.loads(out.read_text())
    assert report["rounds"] == 2 and [len(r["round_tokens_per_s"]) for r in report["arms"]] == [2]


def test_causal_work_is_the_share_of_causal_pairs_inside_documents(bench_train):
    from proxycomp.vocab import Vocabulary
    doc_ids = torch.tensor([[0, 0, 1, 1, 1, 1], [5, 5, 5, 5, 5, 5]])  # 3 + 10 of 21 pairs; all 21
    work = bench_train.Workload("raw", Vocabulary(), [{"doc_ids": doc_ids}])
    assert work.causal_work() == pytest.approx((13 / 21 + 1) / 2)


def test_throughput_table_compares_every_arm_with_the_flex_loop(bench_train):
    def arm(name, tokens_per_s):
        return dict(model="d768", arm=name, tokens_per_s=tokens_per_s, step_ms=1.0, tflops=1.0, mfu=0.5,
                    round_tokens_per_s=[tokens_per_s])

    rows = bench_train.throughput_table([arm("fit-triton-compile", 120.0), arm("plain-compile", 110.0),
                                         arm("plain-flex-compile", 100.0),
                                         arm("plain-triton-compile", 130.0)]).splitlines()
    assert "| vs plain (SDPA) | vs flex |" in rows[0]
    assert "| 1.091x | 1.200x |" in rows[2] and "| 0.909x | 1.000x |" in rows[4]
    # The plain loops with a document mask are compared against, not taken as the SDPA baseline.
    assert "| 1.182x | 1.300x |" in rows[5]
    without = bench_train.throughput_table([arm("fit-triton-compile", 120.0)]).splitlines()
    assert "| n/a | n/a |" in without[2]


def test_rounds_take_each_ratio_within_its_round_and_print_the_range(bench_train):
    def arm(name, *rounds):
        run = dict(model="d768", arm=name, seconds=2.0, step_ms=1.0, tflops=1.0, mfu=0.5, peak_gib=1.0)
        return bench_train.merge_rounds([{**run, "tokens_per_s": t, "peak_gib": 1.0 + i}
                                         for i, t in enumerate(rounds)])

    # Round by round fit runs 1.2, 1.1 and 1.1x Flex: the median of those, where the medians' ratio would read 1.2.
    fit, flex = arm("fit-triton-compile", 120.0, 110.0, 121.0), arm("plain-flex-compile", 100.0, 100.0, 110.0)
    assert fit["tokens_per_s"] == 120.0 and fit["round_tokens_per_s"] == [120.0, 110.0, 121.0]
    assert fit["step_ms"] == pytest.approx(1.0) and fit["peak_gib"] == 3.0
    slower = arm("fit-triton-compile", 60.0, 50.0, 40.0)  # the figures follow the median round's tokens/s
    assert slower["step_ms"] == pytest.approx(1.2) and slower["mfu"] == pytest.approx(0.5 * 50 / 60)
    rows = bench_train.throughput_table([fit, flex]).splitlines()
    assert "| n/a | 1.100x (1.100-1.200) |" in rows[2]
    failed = arm("plain", 1.0) | {"error": "OutOfMemoryError: x"}
    assert bench_train.merge_rounds([arm("plain", 1.0), failed]) is failed


@pytest.mark.skipif(torch.cuda.is_available(), reason="the flex arm runs where there is CUDA")
def test_flex_arm_asks_for_a_gpu_on_the_cpu(bench_train, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_train.main(["--sizes", "tiny", "--arms", "plain,plain-flex-compile"])
    assert exit_info.value.code == 2
    assert "--arms: plain-flex-compile needs a CUDA GPU" in capsys.readouterr().err.strip().splitlines()[-1]


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
        (["--sizes", "tiny", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["--sizes", "tiny", "--profile", "p", "--rounds", "2"], "--profile and --rounds"),
        (["--sizes", "tiny", "--doc_len", "0"], "--doc_len 0: takes a positive length"),
        (["--sizes", "tiny", "--windows", "spm", "--doc_len", "512"], "with --windows raw"),
    ],
)
def test_bad_options_exit_with_one_line(bench_train, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench_train.main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error
