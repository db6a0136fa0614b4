"""proxycomp.bench.kernels: options are checked before any GPU work, with one-line errors (the timing runs on the
H200)."""
from __future__ import annotations

import sys

import pytest
import torch


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
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--parts: choose from attention, embedding, flex, host, rope, sweep" in error


@pytest.mark.parametrize("parts", ["embedding", "flex", "attention,flex", "host", "rope"])
def test_valid_parts_reach_the_gpu_check(bench_kernels, monkeypatch, parts):
    monkeypatch.setattr(sys, "argv", ["bench_kernels.py", "--out", "x.json", "--parts", parts])
    monkeypatch.setattr(bench_kernels.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench_kernels.main()


def test_causal_pairs_count_same_document_pairs_up_to_the_diagonal(bench_kernels):
    doc_ids = torch.tensor([[0, 0, 0, 1, 1], [4, 4, 4, 4, 4]])  # 6 + 3; 15
    assert bench_kernels.causal_pairs(doc_ids) == 6 + 3 + 15


def test_flex_rows_of_fixed_length_documents_are_cut_every_n_positions(bench_kernels):
    ids = bench_kernels.flex_doc_ids("L512", 3, 4096, None, None, device="cpu")
    assert ids.shape == (3, 4096) and (ids == ids[0]).all()
    assert torch.unique_consecutive(ids[0], return_counts=True)[1].tolist() == [512] * 8
    odd = bench_kernels.flex_doc_ids("L5", 1, 12, None, None, device="cpu")
    assert odd.tolist() == [[0] * 5 + [1] * 5 + [2] * 2]  # the window cuts the last document
    random = bench_kernels.flex_doc_ids(8, 2, 4096, torch.Generator().manual_seed(0), None, device="cpu")
    assert [len(torch.unique(row)) for row in random] == [8, 8]


def test_per_document_runs_each_document_as_its_own_sequence(bench_kernels):
    """cuDNN's control in the flex part: causal attention over whole sequences, run per document, is the
    document-masked attention, forward and gradients, on the model's (B, S, H, D) layout."""
    from proxycomp.kernels.reference import attention_reference

    gen = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 12, 3, 8, generator=gen).transpose(1, 2).requires_grad_() for _ in range(3)]
    grad_out = torch.randn(2, 3, 12, 8, generator=gen)
    def causal(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    doc_ids = bench_kernels.flex_doc_ids("L4", 2, 12, None, None, device="cpu")
    got = bench_kernels.per_document(causal, 4)(*qkv)
    grads = torch.autograd.grad(got, qkv, grad_out)
    want = attention_reference(*qkv, doc_ids=doc_ids)
    torch.testing.assert_close(got, want)
    for g, w in zip(grads, torch.autograd.grad(want, qkv, grad_out)):
        torch.testing.assert_close(g, w)
    assert [bench_kernels.document_length(d, 4096) for d in (1, "L512", "L5", 8, "spm")] == [4096, 512, None, None,
                                                                                              None]


def _flex_rows(shape, docs, graph_ok=True):
    batch, heads, seq, dim = shape
    times = {"ours": 1.0, "ours_other": 1.5, "flex": 1.3, "cudnn_causal": 0.9}
    impls = ["ours", "ours_other", "flex"] + (["cudnn_causal"] if docs in (1, "L512") else [])
    # Host-launched rounds: Flex's spread around its median, the others steady; a record without graphs has none
    # (as those written before the rounds).
    rounds = {i: [2 * times[i] + (d if i == "flex" else 0) for d in (-0.2, 0.0, 0.2)] for i in impls}
    return [dict(kind="flex", impl=i, B=batch, H=heads, S=seq, D=dim, docs=docs, docs_per_row=4.0, kept=0.25,
                 rel_err=0.01, host_ms=2 * times[i], **({"host_rounds": rounds[i]} if graph_ok else {}),
                 graph_ms=times[i] if graph_ok else None,
                 fwd_graph_ms=times[i] / (4 if i == "flex" else 2) if graph_ok else None, host_tflops=100.0,
                 graph_tflops=200.0 / times[i] if graph_ok else None) for i in impls]


def test_flex_summary_states_ratios_per_row_and_records(bench_kernels, tmp_path):
    results = [dict(kind="gemm_ceiling", tflops=700.0), *_flex_rows((8, 12, 4096, 64), 1),
               *_flex_rows((8, 12, 4096, 64), "spm"), *_flex_rows((4, 16, 4096, 128), 32, graph_ok=False),
               *_flex_rows((4, 16, 4096, 128), "L512")]
    rows, ratios = bench_kernels.summary(results)
    assert ratios["D64_docs1_vs_flex_host"] == pytest.approx(1.3)
    assert ratios["D64_docs1_vs_flex_graph"] == pytest.approx(1.3)
    assert ratios["D64_docs1_vs_cudnn_graph"] == pytest.approx(0.9)
    assert ratios["D64_docsspm_vs_other_graph"] == pytest.approx(1.5)
    assert "D64_docsspm_vs_cudnn_graph" not in ratios  # cuDNN runs per document: only where they have one length
    assert ratios["D128_docsL512_vs_cudnn_graph"] == pytest.approx(0.9)
    assert ratios["D128_docs32_vs_flex_graph"] is None  # no graph time: no ratio, and the table says n/a
    assert ratios["D128_docsL512_vs_flex_host"] == pytest.approx(1.3)
    assert ratios["D64_docs1_fwd_vs_flex_graph"] == pytest.approx(0.65)  # the forward's share of the ratio
    assert ratios["D128_docs32_fwd_vs_flex_graph"] is None
    table = [r for r in rows if r.startswith("(") and not r.startswith("(B,H,S,D)")]
    assert len(table) == 4 and " L512 " in table[3]
    assert "2.00|1.00" in table[0] and "1.80|0.90" in table[0]
    assert table[0].endswith(" 0.65     1.30|1.30 1.20-1.40")  # each round's Flex time over ours
    assert "1.30|n/a" in table[2] and table[2].rstrip().endswith("1.30|n/a       n/a")
    assert rows[-1].startswith("ratios (x faster than): ") and "D128_docs32_vs_flex_graph=n/a" in rows[-1]

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Kernels\n\nnotes\n\n## Later\n")
    bench_kernels.record(path, rows, ratios, "NVIDIA H200", "python tools/bench_kernels.py --parts flex")
    text = path.read_text()
    assert text.index("notes") < text.index("`python tools/bench_kernels.py --parts flex`") < text.index("## Later")
    assert table[2] in text


def test_host_summary_compares_triton_dispatch_with_the_launcher(bench_kernels):
    results = [dict(kind="host", impl=impl, B=1, H=1, S=256, D=64, docs=4, host_us=host, wall_us=host + 5)
               for impl, host in (("launcher", 200.0), ("triton", 300.0), ("compiled", 900.0))]
    rows, ratios = bench_kernels.summary(results)
    assert ratios["host_S256_docs4_triton_vs_launcher"] == pytest.approx(1.5)
    line = next(r for r in rows if r.startswith("(1, 1, 256, 64)"))
    assert "200|205" in line and "300|305" in line and "900|905" in line and line.rstrip().endswith("1.50")


def test_host_pieces_row_says_what_lies_beside_the_launches(bench_kernels):
    us = {"engine": 90.0, "fwd launches": 50.0, "bwd launches": 130.0, "fwd no grad": 80.0, "fwd": 91.0,
          "bwd": 400.0, "fwd+bwd": 551.0}
    results = [dict(kind="host", impl=impl, B=1, H=1, S=256, D=64, docs=4, host_us=1.0, wall_us=1.0)
               for impl in ("launcher", "triton", "compiled")]
    rows, _ = bench_kernels.summary([*results, dict(kind="host_pieces", B=1, H=1, S=256, D=64, docs=4, us=us)])
    header = rows.index(next(r for r in rows if r.startswith("host pieces")))
    assert all(name in rows[header + 1] for name in us)
    cells = rows[header + 2].split()
    assert rows[header + 2].startswith("(1, 1, 256, 64)")
    assert cells[4:] == ["4", "90", "50", "130", "80", "91", "400", "551", "371"]  # beside launches: 551 - 50 - 130


def test_spm_doc_ids_are_the_spm_streams_windows(bench_kernels):
    doc_ids = bench_kernels.spm_doc_ids("tiny", 256, 2, seed=0)
    assert doc_ids.shape == (2, 256)
    assert (doc_ids[:, 1:] >= doc_ids[:, :-1]).all()  # packed: ids never decrease within a window
    assert bench_kernels.causal_pairs(doc_ids) <= 2 * 256 * 257 // 2


def test_short_tile_sweep_rows_name_their_config(bench_kernels):
    for dim, configs in bench_kernels.SWEEP_SHORT.items():
        default = bench_kernels.default_config(dim, torch.device("cuda"))
        assert configs[0] == (default.short_span, default.short_block, default.short_step, default.short_warps,
                              default.short_stages)
        assert [c[0] for c in configs].count(0) == 1  # the single launch: the reference of the others
    result = dict(kind="sweep_short", B=8, H=12, S=4096, D=64, docs=32, config=(128, 32, 32, 4, 2), ms=0.5,
                  rounds_ms=[0.5, 0.6, 0.4])
    rows, _ = bench_kernels.summary([result])
    assert rows[0] == "sweep short (8, 12, 4096, 64)  docs=32   (128, 32, 32, 4, 2)        0.500 ms graph"


def test_block_sweep_rows_say_which_documents_they_timed(bench_kernels):
    assert bench_kernels.SWEEP_DOCS[0] == 1 and "L512" in bench_kernels.SWEEP_DOCS
    rows, _ = bench_kernels.summary([
        dict(kind="sweep_fwd", B=8, H=12, S=4096, D=64, docs="L512", config=(64, 64, 4, 3), ms=0.2, tflops=150.0),
        dict(kind="sweep_fwd_bwd", B=8, H=12, S=4096, D=64, config=(64, 64, 64, 64, 4, 3), ms=2.0, tflops=300.0),
        dict(kind="sweep_fwd_bwd", B=8, H=12, S=4096, D=64, docs=1, config=["tile_group", 24], ms=2.0, tflops=310.0)])
    assert rows[0].startswith("sweep fwd (8, 12, 4096, 64)  docs=L512 (64, 64, 4, 3)") and rows[0].endswith(
        "150 TF/s")
    assert "docs=1    (64, 64, 64, 64, 4, 3)" in rows[1]  # a record from before documents were swept: one
    assert "docs=1    ('tile_group', 24)" in rows[2]  # the launch order, as the JSON gives it back


def test_rope_summary_states_what_rope_adds_to_each_pass(bench_kernels):
    row = dict(kind="rope", B=8, H=12, S=4096, D=64, docs="L512", fwd_us=100.0, bwd_us=300.0, fwd_rope_us=130.0,
               bwd_rope_us=315.0, rotate_k_us=40.0, rotate_qk_us=78.0, err=1e-3)
    rows, ratios = bench_kernels.summary([dict(kind="gemm_ceiling", tflops=700.0), row])
    line = next(r for r in rows if r.startswith("L512 "))
    assert line.split() == ["L512", "100.0", "+30.0", "300.0", "+15.0", "40.0", "78.0"]
    assert not any(name.startswith("rope") for name in ratios)
    assert not any(r.startswith("rope part") for r in bench_kernels.summary([dict(kind="gemm_ceiling",
                                                                                   tflops=700.0)])[0])
