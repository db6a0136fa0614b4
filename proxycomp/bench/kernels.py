"""Benchmark proxycomp's Triton kernels on one GPU beside torch, all in one run.

Attention: TFLOP/s (FA convention: fwd 4*B*H*S^2*D, halved when causal; bwd 2.5x fwd) for ours, SDPA's
flash and cuDNN backends and flash-attn when importable. Document-masked runs (8 documents per
sequence, boundaries fixed by --seed): ours with block skipping, ours computing every causal block, and
SDPA with a dense boolean mask. Embedding fused with RMSNorm: forward+backward time beside torch's two ops.
Flex (`--parts flex`): document-masked fwd+bwd of ours beside FlexAttention (compiled, its block mask made from
the same document ids) at 1, 8, 32 and 128 documents per row cut at random, at documents of 512 positions each
(L512, the windows of `bench_train --doc_len 512`) and on the spm proxy stream's windows, and cuDNN's causal
attention run on each document as a sequence of its own where every document has one length (1 document, L512):
the state of the art's time at that work. Host-launched (the impls in turns, FLEX_ROUNDS rounds, medians) and as
CUDA graphs (GPU time only), and the forward alone as a graph; effective TFLOP/s count only the same-document causal
pairs. `ours_other` is ours with the other launch scheme (short-document tiles on where the default has them off,
and off where it has them on), so each record re-tests the default's choice.

Host (`--parts host`): host microseconds per eager fwd+bwd call of ours, its launches through
`kernels.launching.Launcher` and through Triton's own dispatch alternating in one process, and through
torch.compile; at a shape where the GPU is never the bound and at the flex part's D=64 shape with 32 documents.
Then the pieces of that call, each timed alone: the launchers, the forward with and without autograd, the backward
through the engine, and the engine's cost for a Python Function that launches nothing.

RoPE (`--parts rope`): what the rotation costs each pass of ours at the d768 model's attention shape, at one
document per row and at 512-position documents (positions restarting per document, as the model's): the forward
and the backward, launched as the model's op launches them, with q and k rotated beforehand and given before RoPE,
beside torch.compile's rotation of k (which stays outside the kernels) and of q and k (the model's own rotation,
which the kernels replace); each timed as a CUDA graph, the rotating passes first checked against the rotation done
outside.

Sweep (`--parts sweep`): block configs of the forward and the backward, and the tiles' launch order (tile_group),
at one document and at 512-position documents, launched as the model launches them (RoPE inside), and the
short-document tiles' settings at 32 and 128 random documents and at 512-position ones, each timed as a CUDA graph.

    python tools/bench_kernels.py --out bench.json [--record] [--parts attention,embedding,flex,host,rope,sweep]

Each configuration is checked against SDPA (or torch) once before it is timed.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from proxycomp.bench.record import add_benchmarks_option, append_block
from proxycomp.kernels.attention import (AttentionConfig, default_config, document_bounds, flash_attention,
                                         with_short_tiles)
from proxycomp.kernels.embedding import embedding_rmsnorm
from proxycomp.kernels.reference import document_runs

ATTENTION_SHAPES = [(8, 16, 2048, 64), (4, 16, 4096, 128), (2, 16, 8192, 128)]
EMBEDDING_CASES = [(65536, 1024, 260), (65536, 1024, 8512)]
DOCS_PER_SEQUENCE = 8
# The flex part: the d768 model's attention shape (head size 64) and the D=128 shape of the attention table, both
# at the models' context, so the spm stream's windows fit either.
FLEX_SHAPES = [(8, 12, 4096, 64), (4, 16, 4096, 128)]
# Documents per row cut at random; "L512": documents of 512 positions each, the windows of `bench_train --doc_len
# 512`, so the kernel is timed on a training step's own documents; "spm": the spm proxy stream's windows (last: it
# may be missing).
FLEX_DOCS = (1, 8, 32, 128, "L512", "spm")
# Host-launched timings per impl, taken in turns (the GPU-time ones, as CUDA graphs, once: they move by ~1%). On the
# H100s of 2026-12-07 one row's host-launched ratio to Flex read 0.81-1.32x across four records whose graph ratio
# held at 1.96-2.05x.
FLEX_ROUNDS = 3
PARTS = ("attention", "embedding", "flex", "host", "rope", "sweep")  # --parts
# The rope part: the d768 model's attention shape, at one document per row and at 512-position documents.
ROPE_SHAPE, ROPE_DOCS = (8, 12, 4096, 64), (1, "L512")
# The host part: (B, H, S, D, documents per row); the first leaves the GPU idle, so its times are the host's alone.
HOST_CASES = [(1, 1, 256, 64, 4), (8, 12, 4096, 64, 32)]
HOST_CALLS, HOST_ROUNDS = 200, 3
BENCHMARKS_MD = Path("BENCHMARKS.md")  # --benchmarks' default


def bench_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def attention_flops(batch, heads, seq, dim, causal=True) -> float:
    return 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def sdpa(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return run


def per_document(fn, length: int):
    """`fn`, causal attention over whole sequences, run on each `length`-position document of a (B, H, S, D) input
    as a sequence of its own: the document mask at no cost, where documents tile the rows. Views only, for q, k, v
    laid out as the model's (B, S, H, D) projections and for an output in the same layout."""
    def run(q, k, v):
        batch, _, seq, _ = q.shape
        if seq == length:
            return fn(q, k, v)
        cut = [t.unflatten(2, (seq // length, length)).transpose(1, 2).flatten(0, 1) for t in (q, k, v)]
        return fn(*cut).unflatten(0, (batch, seq // length)).transpose(1, 2).flatten(2, 3)
    return run


def fixed_length(docs: int | str) -> int | None:
    """n for a FLEX_DOCS entry "L<n>" (every document n positions long), else None."""
    return int(docs.removeprefix("L")) if isinstance(docs, str) and docs.startswith("L") else None


def document_length(docs: int | str, seq: int) -> int | None:
    """The one length of every document of a FLEX_DOCS entry, where its documents tile the rows; else None."""
    if docs == 1:
        return seq
    length = fixed_length(docs)
    return length if length is not None and seq % length == 0 else None


def flash_attn_impl():
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        return None
    return lambda q, k, v: flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           causal=True).transpose(1, 2)


def time_one(forward_only: bool, fn, q, k, v, grad_out) -> float:
    """Median ms of the forward (no autograd) or of forward+backward."""
    if forward_only:
        with torch.no_grad():
            return bench_ms(lambda: fn(q, k, v))

    def step():
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v).backward(grad_out)
    return bench_ms(step)


def time_fwd_bwd(fn, q, k, v, grad_out) -> tuple[float, float]:
    return time_one(True, fn, q, k, v, grad_out), time_one(False, fn, q, k, v, grad_out)


def make_qkv(batch, heads, seq, dim, gen):
    # The model's layout: (B, S, H, D) projections seen as (B, H, S, D).
    return [torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
            .transpose(1, 2).requires_grad_() for _ in range(3)]


def check_grads(fn, ref_fn, q, k, v, grad_out, tol=3e-2) -> float:
    outs = []
    for f in (fn, ref_fn):
        for t in (q, k, v):
            t.grad = None
        o = f(q, k, v)
        o.backward(grad_out)
        outs.append([o.detach()] + [t.grad.clone() for t in (q, k, v)])
    worst = max(rel_err(a, b) for a, b in zip(*outs))
    if not worst < tol:
        raise SystemExit(f"correctness check failed: relative error {worst:.3e} >= {tol}")
    return worst


def random_doc_ids(batch, seq, gen, docs: int = DOCS_PER_SEQUENCE, device: str = "cuda") -> torch.Tensor:
    """`docs` documents per row, cut at uniformly random positions."""
    cuts = torch.stack([torch.randperm(seq - 1, generator=gen)[: docs - 1] + 1 for _ in range(batch)])
    marks = torch.zeros(batch, seq, dtype=torch.int64)
    marks.scatter_(1, cuts, 1)
    return marks.cumsum(1).to(device)


def flex_doc_ids(docs: int | str, batch: int, seq: int, gen, spm_rows: torch.Tensor | None,
                 device: str = "cuda") -> torch.Tensor:
    """(batch, seq) document ids of one FLEX_DOCS entry."""
    if docs == "spm":
        return spm_rows[:batch].to(device)
    if isinstance(docs, str):  # "L<n>": every document n positions long (the last one cut by the window)
        return (torch.arange(seq, device=device) // fixed_length(docs)).expand(batch, seq).contiguous()
    return random_doc_ids(batch, seq, gen, docs, device)


def bench_attention(results: list, gen_cpu, gen_cuda) -> None:
    fa = flash_attn_impl()
    for batch, heads, seq, dim in ATTENTION_SHAPES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        flops = attention_flops(batch, heads, seq, dim)
        ours = lambda q, k, v: flash_attention(q, k, v)  # noqa: E731
        impls = {"ours": ours, "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
                 "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
        if fa is not None:
            impls["flash_attn"] = fa
        for name, fn in impls.items():
            err = check_grads(fn, sdpa(SDPBackend.FLASH_ATTENTION), q, k, v, grad_out)
            fwd, fwd_bwd = time_fwd_bwd(fn, q, k, v, grad_out)
            results.append(dict(kind="attention", impl=name, B=batch, H=heads, S=seq, D=dim, rel_err=err,
                                fwd_ms=fwd, fwd_bwd_ms=fwd_bwd, fwd_tflops=flops / fwd * 1e-9,
                                fwd_bwd_tflops=3.5 * flops / fwd_bwd * 1e-9))
            print(f"attn {name:11s} {batch},{heads},{seq},{dim}: fwd {results[-1]['fwd_tflops']:.0f} "
                  f"fwd+bwd {results[-1]['fwd_bwd_tflops']:.0f} TFLOP/s (err {err:.1e})", flush=True)

        doc_ids = random_doc_ids(batch, seq, gen_cpu)
        same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
        dense_mask = (same_doc & torch.ones(seq, seq, dtype=torch.bool, device="cuda").tril())[:, None]
        bounds = document_bounds(doc_ids)  # made once per step by the model, so outside the timed kernel
        doc_impls = {
            "ours_docs": lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds),
            "ours_docs_noskip": lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds, skip_masked_blocks=False),
            "sdpa_dense_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask),
        }
        for name, fn in doc_impls.items():
            err = check_grads(fn, doc_impls["sdpa_dense_mask"], q, k, v, grad_out)
            fwd, fwd_bwd = time_fwd_bwd(fn, q, k, v, grad_out)
            results.append(dict(kind="attention_docs", impl=name, B=batch, H=heads, S=seq, D=dim, rel_err=err,
                                fwd_ms=fwd, fwd_bwd_ms=fwd_bwd))
            print(f"docs {name:17s} {batch},{heads},{seq},{dim}: fwd {fwd:.3f} ms fwd+bwd {fwd_bwd:.3f} ms "
                  f"(err {err:.1e})", flush=True)
        dense_mask = same_doc = None  # frees GPU memory; `del` would unbind a name the lambdas above read


def bench_embedding(results: list, gen_cuda) -> None:
    for tokens, dim, vocab in EMBEDDING_CASES:
        ids = torch.randint(0, vocab, (tokens // 1024, 1024), device="cuda", generator=gen_cuda)
        weight = torch.randn(vocab, dim, device="cuda", dtype=torch.bfloat16, generator=gen_cuda).requires_grad_()
        norm_weight = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen_cuda)).bfloat16().requires_grad_()
        grad = torch.randn(*ids.shape, dim, device="cuda", dtype=torch.bfloat16, generator=gen_cuda)

        def fused(i, w):
            x, y = embedding_rmsnorm(i, w, norm_weight, 1e-6)
            return x.float().sum() + (y.float() * grad).sum()

        def unfused(i, w):
            x = F.embedding(i, w)
            return x.float().sum() + (F.rms_norm(x, (dim,), norm_weight, 1e-6).float() * grad).sum()

        grads = [torch.autograd.grad(fn(ids, weight), (weight, norm_weight)) for fn in (fused, unfused)]
        err = max(rel_err(ours, ref) for ours, ref in zip(*grads))
        assert err < 1e-2, f"embedding_rmsnorm gradients differ from torch: {err:.2e}"
        for name, fn in (("ours_rmsnorm", fused), ("torch_rmsnorm", unfused)):
            def step(fn=fn):
                weight.grad = norm_weight.grad = None
                fn(ids, weight).backward()
            ms = bench_ms(step)
            results.append(dict(kind="embedding_rmsnorm", impl=name, tokens=tokens, dim=dim, vocab=vocab,
                                fwd_bwd_ms=ms, rel_err=err))
            print(f"emb+norm {name:13s} V={vocab}: fwd+bwd {ms:.3f} ms (incl. the same loss ops)", flush=True)


def causal_pairs(doc_ids: torch.Tensor) -> int:
    """Same-document (query, key) pairs with the key at or before the query: the work the effective FLOPs count."""
    pairs = 0
    for row in document_runs(doc_ids.cpu()):
        lengths = torch.unique_consecutive(row, return_counts=True)[1]
        pairs += int((lengths * (lengths + 1) // 2).sum())
    return pairs


def spm_doc_ids(preset_name: str, seq: int, rows: int, seed: int) -> torch.Tensor:
    """(rows, seq) document ids of the first window batch `bench_train --windows spm` trains on: the spm proxy
    recipe's stream past its warmup, over the same corpus and seed."""
    from proxycomp.bench import train

    preset = train.PRESETS[preset_name]
    corpus = train.load_corpus(train.CorpusConfig(max_documents=preset.data_documents), seed=seed)
    docs = [d.data for d in corpus.train]
    size = dataclasses.replace(preset.models[0], seq_len=seq, batch_size=rows)
    spm_model = train.train_spm(docs, preset.spm_vocab_size)
    work = train.workload("spm", size, docs, np.array([len(d) for d in docs]), spm_model, preset, seed,
                          count=1)
    return work.batches[0]["doc_ids"]


def graph_ms(step) -> float:
    """Median GPU ms of `step` replayed as a CUDA graph."""
    return triton.testing.do_bench_cudagraph(step, rep=100, return_mode="median")


def time_graph(fn, q, k, v, grad_out, forward_only: bool = False) -> float | None:
    """Median GPU ms of one fwd+bwd (or forward without autograd) replayed as a CUDA graph: no host launch cost,
    which the host-launched timing of short, cheap rows measures instead. None when the step cannot be captured."""
    def step():
        if forward_only:
            with torch.no_grad():
                fn(q, k, v)
            return
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v).backward(grad_out)
    try:
        return graph_ms(step)
    except Exception as exc:  # noqa: BLE001 - one impl failing to capture must not cost the rest of the device call
        print(f"  CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        return None


def bench_flex(results: list, gen_cpu, gen_cuda, spm_rows: torch.Tensor | None) -> None:
    """Document-masked fwd+bwd: ours (and ours with every tile in the big blocks), FlexAttention with a block mask of
    the same documents, and cuDNN's causal attention on each document where documents have one length
    (per_document); each checked against Flex before it is timed."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention, dynamic=False)
    for batch, heads, seq, dim in FLEX_SHAPES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        default = default_config(dim, q.device)
        # The other launch scheme: one launch per pass where the default splits short tiles off, and back.
        other = with_short_tiles(default, dim) if default.short_span == 0 else dataclasses.replace(default,
                                                                                                  short_span=0)
        # One mask function per shape reading this buffer: new documents are new data, not a recompile.
        runs = torch.zeros(batch, seq, dtype=torch.int64, device="cuda")

        def same_doc_causal(b, h, q_idx, kv_idx):
            return (runs[b, q_idx] == runs[b, kv_idx]) & (kv_idx <= q_idx)

        for docs in FLEX_DOCS if spm_rows is not None else FLEX_DOCS[:-1]:
            doc_ids = flex_doc_ids(docs, batch, seq, gen_cpu, spm_rows)
            runs.copy_(document_runs(doc_ids))
            block_mask = create_block_mask(same_doc_causal, batch, None, seq, seq, device="cuda")
            bounds = document_bounds(doc_ids)
            impls = {"ours": lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds),
                     "ours_other": lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds, config=other),
                     "flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask)}
            length = document_length(docs, seq)
            if length is not None:
                impls["cudnn_causal"] = per_document(sdpa(SDPBackend.CUDNN_ATTENTION), length)
            pairs = causal_pairs(doc_ids)
            flops = 3.5 * 4.0 * heads * dim * pairs
            per_row = runs[:, -1].float().mean().item()  # runs count from 1 in each row
            errs = {}
            for name, fn in list(impls.items()):
                try:
                    errs[name] = check_grads(fn, impls["ours" if name == "flex" else "flex"], q, k, v, grad_out)
                except RuntimeError as exc:  # a baseline's backend refusing a shape costs its column, not the call
                    if name in ("ours", "flex"):
                        raise
                    print(f"  {name} left out: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                    del impls[name]
            # A host-launched time carries the host's load of the moment: the impls take turns for FLEX_ROUNDS
            # rounds, and each keeps its median, so that a slow stretch of the host falls on every impl alike.
            rounds = {name: [] for name in impls}
            for _ in range(FLEX_ROUNDS):
                for name, fn in impls.items():
                    rounds[name].append(time_one(False, fn, q, k, v, grad_out))
            for name, fn in impls.items():
                err, host = errs[name], statistics.median(rounds[name])
                graph = time_graph(fn, q, k, v, grad_out)
                fwd_graph = time_graph(fn, q, k, v, grad_out, forward_only=True)
                results.append(dict(kind="flex", impl=name, B=batch, H=heads, S=seq, D=dim, docs=docs,
                                    docs_per_row=per_row, kept=pairs / (batch * seq * (seq + 1) / 2), rel_err=err,
                                    host_ms=host, host_rounds=rounds[name], graph_ms=graph, fwd_graph_ms=fwd_graph,
                                    host_tflops=flops / host * 1e-9,
                                    graph_tflops=None if graph is None else flops / graph * 1e-9))
                print(f"flex {name:12s} {batch},{heads},{seq},{dim} docs={docs}: fwd+bwd {host:.3f} ms host, "
                      f"{'n/a' if graph is None else f'{graph:.3f}'} ms graph, forward "
                      f"{'n/a' if fwd_graph is None else f'{fwd_graph:.3f}'} ms graph (err {err:.1e})", flush=True)
            block_mask = None  # frees GPU memory; `del` would unbind a name the lambdas above read


def _host_us(step) -> tuple[float, float]:
    """(host, wall) us per call of `step` over HOST_CALLS calls after a warmup: issuing them, and to the GPU's end."""
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(HOST_CALLS):
        step()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    return (issued - start) / HOST_CALLS * 1e6, (time.perf_counter() - start) / HOST_CALLS * 1e6


def bench_host(results: list, gen_cpu, gen_cuda) -> None:
    """Host us per fwd+bwd call (the time to issue HOST_CALLS calls, no sync inside) and wall us (synced), for the
    launch paths in turn, HOST_ROUNDS rounds round-robin so that drift of the host falls on every path alike."""
    from proxycomp.kernels import attention as A

    launchers = (A._FWD, A._DKDV, A._DQ)
    for batch, heads, seq, dim, docs in HOST_CASES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        bounds = document_bounds(random_doc_ids(batch, seq, gen_cpu, docs))
        compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds))
        paths = {"launcher": (True, flash_attention), "triton": (False, flash_attention),
                 "compiled": (True, lambda q, k, v, doc_bounds: compiled(q, k, v))}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
        for _ in range(HOST_ROUNDS):
            for name, (direct, fn) in paths.items():
                for launcher in launchers:
                    launcher.direct = direct
                times[name].append(_host_us(lambda: fn(q, k, v, doc_bounds=bounds).backward(grad_out)))
        for launcher in launchers:
            launcher.direct = True
        for name, rounds in times.items():
            host, wall = (sorted(t[i] for t in rounds)[len(rounds) // 2] for i in (0, 1))
            results.append(dict(kind="host", impl=name, B=batch, H=heads, S=seq, D=dim, docs=docs, host_us=host,
                                wall_us=wall, rounds=rounds))
            print(f"host {name:9s} {batch},{heads},{seq},{dim} docs={docs}: {host:.0f} us host, {wall:.0f} us wall "
                  "per fwd+bwd", flush=True)
        pieces = _host_pieces(A, q, k, v, grad_out, bounds)
        results.append(dict(kind="host_pieces", B=batch, H=heads, S=seq, D=dim, docs=docs, us=pieces))
        print(f"host pieces {batch},{heads},{seq},{dim} docs={docs}: " +
              ", ".join(f"{name} {us:.0f}" for name, us in pieces.items()), flush=True)


def model_angles(start: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's float32 (cos, sin) as the model makes them for documents whose first positions are `start` (B, S, from
    document_bounds): positions restart at every document."""
    from proxycomp.model import ModelConfig, rope_angles

    positions = torch.arange(start.shape[1], device=start.device) - start
    return rope_angles(positions, dim, ModelConfig.rope_theta)


def bench_rope(results: list, gen_cpu, gen_cuda) -> None:
    """Per-pass us of RoPE inside ours (the module docstring's rope part), each launch as a CUDA graph."""
    from proxycomp.kernels import attention as A

    batch, heads, seq, dim = ROPE_SHAPE
    cfg, scale = default_config(dim, torch.device("cuda")), dim ** -0.5
    q, k, v, do = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen_cuda)
                   .transpose(1, 2) for _ in range(4))
    graph = lambda step: graph_ms(step) * 1e3  # noqa: E731 - us
    for docs in ROPE_DOCS:
        start, end = document_bounds(flex_doc_ids(docs, batch, seq, gen_cpu, None))
        angles = model_angles(start, dim)
        qr, kr = (A._rotate(t, *angles) for t in (q, k))

        def fwd(q, cos=None, sin=None):  # k always comes rotated (outside the kernels, as the model's op does)
            return A._launch_fwd(q, kr, v, cos, sin, start, end, True, scale, True, cfg)

        def bwd(q, o, lse, cos=None, sin=None):
            return A._launch_bwd(do, q, kr, v, o, lse, cos, sin, start, end, True, scale, True, cfg)

        o, lse, _ = fwd(qr)
        dq, dk, dv = bwd(qr, o, lse)
        # What the rotating passes must give: o, and dq and dk turned back through RoPE.
        want = (o, *(A._rotate(g, angles[0], -angles[1]) for g in (dq, dk)), dv)
        o_in, lse_in, q_in = fwd(q, *angles)
        err = max(rel_err(a, b) for a, b in zip((o_in, *bwd(q_in, o_in, lse_in, *angles)), want))
        if not err < 3e-2:
            raise SystemExit(f"rope part: RoPE inside the kernels is off by relative error {err:.3e}")
        row = dict(kind="rope", B=batch, H=heads, S=seq, D=dim, docs=docs, fwd_us=graph(lambda: fwd(qr)),
                   bwd_us=graph(lambda: bwd(qr, o, lse)), fwd_rope_us=graph(lambda: fwd(q, *angles)),
                   bwd_rope_us=graph(lambda: bwd(q_in, o_in, lse_in, *angles)),
                   rotate_k_us=graph(torch.compile(lambda: A._rotate(k, *angles))),
                   rotate_qk_us=graph(torch.compile(lambda: (A._rotate(q, *angles), A._rotate(k, *angles)))),
                   err=err)
        results.append(row)
        print(f"rope {batch},{heads},{seq},{dim} docs={docs}: " +
              ", ".join(f"{key} {value:.1f}" for key, value in row.items() if key.endswith("_us")), flush=True)


def rope_summary(results: list) -> tuple[list[str], dict]:
    """One line per documents: each pass's us without RoPE and what the rotation inside adds, and the compiled
    rotations outside; no ratios."""
    rows = []
    rope = [r for r in results if r["kind"] == "rope"]
    if rope:
        rows.append(f"rope part at {ROPE_SHAPE} (B,H,S,D), us a layer as CUDA graphs: each pass rotated beforehand, "
                    "and + what RoPE inside adds; compiled rotations outside")
        rows.append(f"{'docs':5s} {'fwd':>7s} {'+RoPE':>7s} {'bwd':>7s} {'+RoPE':>7s} {'rotate k':>8s} "
                    f"{'rotate q,k':>10s}")
    for r in rope:
        rows.append(f"{r['docs']!s:5s} {r['fwd_us']:7.1f} {r['fwd_rope_us'] - r['fwd_us']:+7.1f} {r['bwd_us']:7.1f} "
                    f"{r['bwd_rope_us'] - r['bwd_us']:+7.1f} {r['rotate_k_us']:8.1f} {r['rotate_qk_us']:10.1f}")
    return rows, {}


class _PassThrough(torch.autograd.Function):
    """No kernel either way: what the autograd engine costs a Python Function's round trip."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def _host_pieces(A, q, k, v, grad_out, bounds) -> dict[str, float]:
    """Host us of each piece of one eager fwd+bwd call (launches through the Launcher; gradients reset to None before
    each call, as the flex part times): where the host time goes, before anything is changed."""
    cfg, scale, (start, end) = default_config(q.shape[-1], q.device), q.shape[-1] ** -0.5, bounds
    x = torch.randn(16, device=q.device, requires_grad=True)
    with torch.no_grad():
        o, lse, _ = A._launch_fwd(q, k, v, None, None, start, end, True, scale, True, cfg)
    retained = flash_attention(q, k, v, doc_bounds=bounds)

    def fresh(step):
        def run():
            for t in (x, q, k, v):
                t.grad = None
            step()
        return run

    def no_grad(step):
        def run():
            with torch.no_grad():
                step()
        return run

    steps = {
        "engine": lambda: _PassThrough.apply(x).backward(x.detach()),
        "fwd launches": no_grad(lambda: A._launch_fwd(q, k, v, None, None, start, end, True, scale, True, cfg)),
        "bwd launches": no_grad(lambda: A._launch_bwd(grad_out, q, k, v, o, lse, None, None, start, end, True, scale,
                                                      True, cfg)),
        "fwd no grad": no_grad(lambda: flash_attention(q, k, v, doc_bounds=bounds)),
        "fwd": lambda: flash_attention(q, k, v, doc_bounds=bounds),
        "bwd": lambda: retained.backward(grad_out, retain_graph=True),
        "fwd+bwd": lambda: flash_attention(q, k, v, doc_bounds=bounds).backward(grad_out),
    }
    return {name: sorted(_host_us(fresh(step))[0] for _ in range(HOST_ROUNDS))[HOST_ROUNDS // 2]
            for name, step in steps.items()}


def host_summary(results: list) -> tuple[list[str], dict]:
    """One line per case: host|wall us per fwd+bwd of each launch path, and Triton's dispatch over the Launcher;
    then the pieces of the Launcher path's call."""
    host = [r for r in results if r["kind"] == "host"]
    if not host:
        return [], {}
    impls = ("launcher", "triton", "compiled")
    rows = ["host part: us per eager fwd+bwd call, host (issuing the calls)|wall (to the last kernel's end)",
            f"{'(B,H,S,D)':18s} {'docs':>4s} " + " ".join(f"{i:>11s}" for i in impls) +
            f" {'triton/launcher host':>21s}"]
    ratios = {}
    for case in dict.fromkeys((r["B"], r["H"], r["S"], r["D"], r["docs"]) for r in host):
        by = {r["impl"]: r for r in host if (r["B"], r["H"], r["S"], r["D"], r["docs"]) == case}
        ratio = by["triton"]["host_us"] / by["launcher"]["host_us"]
        ratios[f"host_S{case[2]}_docs{case[4]}_triton_vs_launcher"] = ratio
        rows.append(f"{str(case[:4]):18s} {case[4]:>4d} " +
                    " ".join(f"{by[i]['host_us']:>5.0f}|{by[i]['wall_us']:<5.0f}" for i in impls) + f" {ratio:>21.2f}")
    pieces = [r for r in results if r["kind"] == "host_pieces"]
    if pieces:
        names = list(pieces[0]["us"])
        rows += ["host pieces: us of host per call (engine: a kernel-free autograd.Function's backward; launches: "
                 "the launchers alone; beside launches: fwd+bwd less both launch columns)",
                 f"{'(B,H,S,D)':18s} {'docs':>4s} " + " ".join(f"{n:>12s}" for n in names) +
                 f" {'beside launches':>15s}"]
        for r in pieces:
            us = r["us"]
            beside = us["fwd+bwd"] - us["fwd launches"] - us["bwd launches"]
            rows.append(f"{str((r['B'], r['H'], r['S'], r['D'])):18s} {r['docs']:>4d} " +
                        " ".join(f"{us[n]:>12.0f}" for n in names) + f" {beside:>15.0f}")
    return rows, ratios


def flex_summary(results: list) -> tuple[list[str], dict]:
    """One line per (shape, documents): fwd+bwd ms host-launched | as a CUDA graph per impl, the effective TFLOP/s
    of ours and Flex from the graph time, Flex's forward graph time over ours (which pass the ratio comes from),
    Flex's fwd+bwd time over ours (x faster than Flex), and the range of that host-launched ratio over the rounds
    (each round's Flex time over ours; n/a for records without rounds)."""
    rows, ratios = [], {}
    flex = [r for r in results if r["kind"] == "flex"]
    if not flex:
        return rows, ratios
    impls = ("ours", "ours_other", "flex", "cudnn_causal")
    rows.append("flex part: fwd+bwd ms host-launched|CUDA graph; effective TFLOP/s (same-document causal pairs) "
                "from graph times")
    rows.append(f"{'(B,H,S,D)':18s} {'docs':>4s} {'/row':>5s} {'kept':>5s} " + " ".join(f"{i:>13s}" for i in impls) +
                f" {'eff ours/flex':>13s} {'fwd flex/ours':>13s} {'flex/ours h|g':>13s} {'h rounds':>9s}")

    def ms(r):
        if r is None:
            return "-"
        return f"{r['host_ms']:.2f}|" + ("n/a" if r["graph_ms"] is None else f"{r['graph_ms']:.2f}")

    def ratio(slow, fast, key):  # records from before the forward was timed have no fwd_graph_ms
        return None if slow.get(key) is None or fast.get(key) is None else slow[key] / fast[key]

    cases = dict.fromkeys((r["B"], r["H"], r["S"], r["D"], r["docs"]) for r in flex)
    for case in cases:
        by = {r["impl"]: r for r in flex if (r["B"], r["H"], r["S"], r["D"], r["docs"]) == case}
        ours, other = by["ours"], by["flex"]
        eff = "/".join("n/a" if r["graph_tflops"] is None else f"{r['graph_tflops']:.0f}" for r in (ours, other))
        versus = [ratio(other, ours, key) for key in ("host_ms", "graph_ms")]
        name = f"D{case[3]}_docs{case[4]}"
        ratios[f"{name}_vs_flex_host"], ratios[f"{name}_vs_flex_graph"] = versus
        ratios[f"{name}_vs_other_graph"] = ratio(by["ours_other"], ours, "graph_ms")
        fwd = ratios[f"{name}_fwd_vs_flex_graph"] = ratio(other, ours, "fwd_graph_ms")
        if "cudnn_causal" in by:
            ratios[f"{name}_vs_cudnn_graph"] = ratio(by["cudnn_causal"], ours, "graph_ms")
        shown = "|".join("n/a" if x is None else f"{x:.2f}" for x in versus)
        each = [f / o for f, o in zip(other.get("host_rounds", ()), ours.get("host_rounds", ()))]
        spread = f"{min(each):.2f}-{max(each):.2f}" if each else "n/a"
        rows.append(f"{str(case[:4]):18s} {str(case[4]):>4s} {ours['docs_per_row']:5.1f} {ours['kept']:5.0%} " +
                    " ".join(f"{ms(by.get(i)):>13s}" for i in impls) +
                    f" {eff:>13s} {'n/a' if fwd is None else f'{fwd:.2f}':>13s} {shown:>13s} {spread:>9s}")
    return rows, ratios


SWEEP_ROUNDS = 3
# The byte models' attention shapes (proxycomp.bench.train: d768 has 12 heads and d1024 16, both of size 64, at
# T=4096) and the D=128 shape of the attention table.
SWEEP_SHAPES = [(8, 12, 4096, 64), (4, 16, 4096, 128)]
# Documents per row: one (full causal, where the defaults were picked) and the 512-position documents of
# `bench_train --doc_len 512`, where the training step is the kernel's to win (BENCHMARKS.md, 2026-12-05).
SWEEP_DOCS = (1, "L512")
# AttentionConfig.tile_group, each with the default blocks: 1 is the grid's own order, 96 every row of the d768 shape.
# A shape runs the groups these become on its rows (the largest divisor up to each: 1 / 8 / 16 / 32 / 64 at D=128).
SWEEP_GROUPS = (1, 12, 24, 48, 96)
# (block_m, block_n, warps, stages) of the forward.
SWEEP_FWD = [(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 8, 4),
             (128, 32, 4, 3)]
# (dkdv key block, dkdv query step, dq query block, dq key block, warps, stages[, dk/dv masked loops' stages]); the
# last of each: the default with the dk/dv pass's masked loops unpipelined, which spill less at head size 128
# (compile_check).
SWEEP_BWD = {
    64: [(64, 64, 64, 64, 4, 3), (128, 64, 128, 64, 8, 3), (64, 64, 64, 32, 4, 3), (64, 32, 64, 64, 4, 3),
         (128, 32, 128, 32, 4, 5), (128, 32, 128, 32, 4, 3), (128, 64, 128, 64, 4, 3), (64, 64, 64, 64, 4, 4),
         (64, 32, 64, 32, 4, 3), (64, 32, 64, 64, 4, 3, 1)],
    128: [(128, 64, 128, 32, 8, 3), (128, 64, 128, 64, 8, 3), (128, 64, 64, 64, 8, 3), (128, 64, 128, 64, 8, 2),
          (64, 64, 64, 64, 4, 3), (128, 32, 128, 32, 8, 3), (64, 64, 64, 32, 4, 2), (64, 32, 64, 64, 4, 3),
          (128, 64, 128, 64, 8, 3, 1)],
}


# (short_span, short_block, short_step, short_warps, short_stages) of the short-document tiles, timed at the flex
# part's shapes with 32 and 128 documents per row and on 512-position documents; (0, 0, 0, 4, 2) is the single
# launch, the reference each config is checked against. The first of each list is the default.
SWEEP_SHORT = {
    64: [(0, 0, 0, 4, 2), (128, 32, 32, 4, 2), (256, 32, 32, 4, 2), (128, 32, 16, 4, 2), (128, 64, 32, 4, 2),
         (128, 32, 32, 2, 2), (128, 16, 32, 2, 2)],
    128: [(0, 0, 0, 4, 2), (256, 64, 32, 4, 2), (512, 64, 32, 4, 2), (256, 32, 32, 4, 2), (256, 64, 64, 4, 2),
          (256, 64, 32, 8, 2), (256, 64, 32, 4, 3)],
}
SWEEP_SHORT_DOCS = (32, 128, "L512")


def timed_rounds(candidates: list, reference, q, k, v, grad_out) -> dict[int, tuple[float, list[float]]]:
    """The sweeps' timing: each (label, fn, forward_only) is checked against `reference` first (a config that fails,
    e.g. past shared memory or registers, is reported and skipped), then all are timed as CUDA graphs SWEEP_ROUNDS
    times round-robin (timings drift over minutes of a device call; one pass per config would let the drift pick the
    winner). {index: (median ms, the rounds' ms)} of those that every round captured."""
    timings: dict[int, list[float]] = {}
    for i, (label, fn, _) in enumerate(candidates):
        try:
            check_grads(fn, reference, q, k, v, grad_out)
        except Exception as exc:  # noqa: BLE001 - one config failing must not cost the rest of the device call
            print(f"{label}: failed {type(exc).__name__}: {str(exc)[:80]}", flush=True)
            continue
        timings[i] = []
    for _ in range(SWEEP_ROUNDS):
        for i in timings:
            _, fn, forward_only = candidates[i]
            timings[i].append(time_graph(fn, q, k, v, grad_out, forward_only=forward_only))
    return {i: (sorted(times)[len(times) // 2], times) for i, times in timings.items() if None not in times}


def sweep_short(results: list, gen_cpu, gen_cuda) -> None:
    """Time the short-tile configs on short documents as CUDA graphs (GPU time; host-launched, these rows time the
    host) by timed_rounds, each checked against the single launch first."""
    fields = [f.name for f in dataclasses.fields(AttentionConfig) if f.name.startswith("short_")]
    for batch, heads, seq, dim in FLEX_SHAPES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        base = default_config(dim, q.device)
        for docs in SWEEP_SHORT_DOCS:
            bounds = document_bounds(flex_doc_ids(docs, batch, seq, gen_cpu, None))
            configs = [(c, dataclasses.replace(base, **dict(zip(fields, c)))) for c in SWEEP_SHORT[dim]]
            fns = [lambda q, k, v, cfg=cfg: flash_attention(q, k, v, doc_bounds=bounds, config=cfg)
                   for _, cfg in configs]
            single = fns[next(i for i, (c, _) in enumerate(configs) if c[0] == 0)]
            labels = [f"sweep_short {(batch, heads, seq, dim)} docs={docs} {c}" for c, _ in configs]
            timed = timed_rounds([(label, fn, False) for label, fn in zip(labels, fns)], single, q, k, v, grad_out)
            for i, (ms, times) in timed.items():
                results.append(dict(kind="sweep_short", B=batch, H=heads, S=seq, D=dim, docs=docs,
                                    config=configs[i][0], ms=ms, rounds_ms=times))
                print(f"{labels[i]}: {ms:.3f} ms graph (median of {', '.join(f'{t:.3f}' for t in times)})",
                      flush=True)


def sweep_attention(results: list, gen_cpu, gen_cuda) -> None:
    """Time block configs at the models' shapes, at each of SWEEP_DOCS; the defaults in attention.py come from here.

    Each config is launched as the model launches it: q and k before RoPE, with the angles of positions restarting
    per document. Each is timed by timed_rounds (a single-pass sweep once timed one config at 174 and, minutes
    earlier, 259 TFLOP/s). Forward configs are timed alone; backward configs as forward+backward with the default
    forward. Times are of CUDA graphs (GPU time: host-launched, the short documents' rows would time the host),
    checked first against FlashAttention on q and k rotated beforehand (one document) or the default config
    (documents). TFLOP/s count the same-document causal pairs."""
    from proxycomp.kernels import attention as A

    for batch, heads, seq, dim in SWEEP_SHAPES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        base = default_config(dim, q.device)
        fields = [f.name for f in dataclasses.fields(AttentionConfig)]
        configs = [("sweep_fwd", c, dataclasses.replace(base, **dict(zip(fields[:4], c)))) for c in SWEEP_FWD]
        configs += [("sweep_fwd_bwd", c, dataclasses.replace(base, **dict(zip(fields[4:], c))))
                    for c in SWEEP_BWD[dim]]
        configs += [(kind, ("tile_group", group), dataclasses.replace(base, tile_group=group))
                    for kind in ("sweep_fwd", "sweep_fwd_bwd")
                    for group in sorted({A._grid(1, batch * heads, g)[1] for g in SWEEP_GROUPS})]
        for docs in SWEEP_DOCS:
            doc_ids = flex_doc_ids(docs, batch, seq, gen_cpu, None)
            bounds = document_bounds(doc_ids)
            angles = model_angles(bounds[0], dim)
            bounds = None if docs == 1 else bounds
            flops = 4.0 * heads * dim * causal_pairs(doc_ids)
            if bounds is None:
                flash = sdpa(SDPBackend.FLASH_ATTENTION)
                reference = lambda q, k, v: flash(A._rotate(q, *angles), A._rotate(k, *angles), v)  # noqa: E731
            else:
                reference = lambda q, k, v: flash_attention(q, k, v, doc_bounds=bounds, rope=angles)  # noqa: E731
            candidates = [(f"{kind} {(batch, heads, seq, dim)} docs={docs} {variant}",
                           lambda q, k, v, cfg=cfg: flash_attention(q, k, v, doc_bounds=bounds, config=cfg,
                                                                    rope=angles),
                           kind == "sweep_fwd") for kind, variant, cfg in configs]
            for i, (ms, times) in timed_rounds(candidates, reference, q, k, v, grad_out).items():
                kind, variant, _ = configs[i]
                tflops = (1.0 if kind == "sweep_fwd" else 3.5) * flops / ms * 1e-9
                results.append(dict(kind=kind, B=batch, H=heads, S=seq, D=dim, docs=docs, config=variant, ms=ms,
                                    rounds_ms=times, tflops=tflops))
                print(f"{candidates[i][0]}: {tflops:.0f} TFLOP/s (median of {', '.join(f'{t:.3f}' for t in times)} "
                      f"ms graph)", flush=True)


def summary(results: list) -> tuple[list[str], dict]:
    rows, ratios = [], {}
    by = {(r["kind"], r["impl"], r.get("S"), r.get("vocab")): r for r in results if "impl" in r}
    shapes = ATTENTION_SHAPES if any(kind == "attention" for kind, *_ in by) else []
    if shapes:
        rows.append(f"{'attention (B,H,S,D)':22s} {'impl':17s} {'fwd TF/s':>9s} {'f+b TF/s':>9s}")
    for batch, heads, seq, dim in shapes:
        for impl in ("ours", "sdpa_flash", "sdpa_cudnn", "flash_attn"):
            r = by.get(("attention", impl, seq, None))
            if r:
                rows.append(f"{str((batch, heads, seq, dim)):22s} {impl:17s} {r['fwd_tflops']:9.0f} "
                            f"{r['fwd_bwd_tflops']:9.0f}")
        ours = by[("attention", "ours", seq, None)]
        for impl in ("sdpa_flash", "sdpa_cudnn"):
            ratios[f"attn_S{seq}_fwd_bwd_vs_{impl}"] = by[("attention", impl, seq, None)]["fwd_bwd_ms"] / \
                ours["fwd_bwd_ms"]
        for impl in ("ours_docs", "ours_docs_noskip", "sdpa_dense_mask"):
            r = by[("attention_docs", impl, seq, None)]
            rows.append(f"{str((batch, heads, seq, dim)):22s} {impl:17s} {r['fwd_ms']:7.3f}ms {r['fwd_bwd_ms']:7.3f}ms")
        docs = by[("attention_docs", "ours_docs", seq, None)]
        for impl in ("ours_docs_noskip", "sdpa_dense_mask"):
            ratios[f"docs_S{seq}_fwd_bwd_vs_{impl}"] = by[("attention_docs", impl, seq, None)]["fwd_bwd_ms"] / \
                docs["fwd_bwd_ms"]
    for tokens, dim, vocab in EMBEDDING_CASES if any(kind == "embedding_rmsnorm" for kind, *_ in by) else []:
        o, t = by[("embedding_rmsnorm", "ours_rmsnorm", None, vocab)], by[("embedding_rmsnorm", "torch_rmsnorm",
                                                                            None, vocab)]
        rows.append(f"{f'emb+rmsnorm V={vocab}':22s} {'ours / torch':17s} {o['fwd_bwd_ms']:7.3f}ms "
                    f"{t['fwd_bwd_ms']:7.3f}ms")
        ratios[f"emb_rmsnorm_V{vocab}_vs_torch"] = t["fwd_bwd_ms"] / o["fwd_bwd_ms"]
    for part_summary in (flex_summary, host_summary, rope_summary):
        part_rows, part_ratios = part_summary(results)
        rows += part_rows
        ratios.update(part_ratios)
    for r in results:
        if r["kind"] in ("sweep_fwd", "sweep_fwd_bwd"):
            what = "fwd" if r["kind"] == "sweep_fwd" else "f+b"
            rows.append(f"sweep {what} {str((r['B'], r['H'], r['S'], r['D'])):18s} docs={r.get('docs', 1)!s:<4s} "
                        f"{str(tuple(r['config'])):38s} {r['tflops']:5.0f} TF/s")
        if r["kind"] == "sweep_short":
            rows.append(f"sweep short {str((r['B'], r['H'], r['S'], r['D'])):18s} docs={r['docs']!s:<4s} "
                        f"{str(tuple(r['config'])):24s} {r['ms']:7.3f} ms graph")
    rows.append("ratios (x faster than): " + ", ".join(f"{k}={'n/a' if v is None else f'{v:.2f}'}"
                                                      for k, v in ratios.items()))
    return rows, ratios


def record(path: Path, rows: list[str], ratios: dict, device: str, command: str) -> None:
    block = "\n".join([f"### {datetime.date.today().isoformat()} · {device} · torch {torch.__version__} · "
                       f"triton {triton.__version__}", f"`{command}`", "", "```", *rows, "```"])
    append_block(path, "## Kernels", block)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", required=True, help="path of the JSON file with every figure")
    parser.add_argument("--record", action="store_true", help="append a dated block to BENCHMARKS.md")
    add_benchmarks_option(parser, BENCHMARKS_MD)
    parser.add_argument("--parts", default="attention,embedding",
                        help="comma-separated: attention (incl. document masking), embedding (fused with RMSNorm), "
                             "flex (document-masked attention beside FlexAttention at 1-128 documents per row and "
                             "on the spm stream's windows), host (host time per call of each launch path), rope (what "
                             "RoPE inside costs each pass), sweep "
                             "(attention block configs at the models' shapes)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts - set(PARTS):  # split never yields an empty set; "" is refused here
        parser.error(f"--parts: choose from {', '.join(PARTS)}; got {args.parts!r}")
    if not torch.cuda.is_available():
        raise SystemExit("bench_kernels: needs a CUDA GPU")
    gen_cpu = torch.Generator().manual_seed(args.seed)
    gen_cuda = torch.Generator(device="cuda").manual_seed(args.seed)
    device = torch.cuda.get_device_name()
    results: list = []
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen_cuda)
    gemm = 2 * 8192**3 / bench_ms(lambda: a @ a) * 1e-9
    results.append(dict(kind="gemm_ceiling", tflops=gemm))
    print(f"GEMM 8192^3 bf16: {gemm:.0f} TFLOP/s", flush=True)
    a = None  # frees GPU memory; `del` would unbind a name the lambda above reads
    if "attention" in parts:
        bench_attention(results, gen_cpu, gen_cuda)
    if "embedding" in parts:
        bench_embedding(results, gen_cuda)
    if "flex" in parts:
        try:
            spm_rows = spm_doc_ids("h200", FLEX_SHAPES[0][2], max(shape[0] for shape in FLEX_SHAPES), args.seed)
        except Exception as exc:  # noqa: BLE001 - the data pipeline (corpus, SentencePiece, codecs) missing must not cost the grid
            print(f"flex: no spm row ({type(exc).__name__}: {exc})", flush=True)
            spm_rows = None
        bench_flex(results, gen_cpu, gen_cuda, spm_rows)
    if "host" in parts:
        bench_host(results, gen_cpu, gen_cuda)
    if "rope" in parts:
        bench_rope(results, gen_cpu, gen_cuda)
    if "sweep" in parts:
        sweep_attention(results, gen_cpu, gen_cuda)
        sweep_short(results, gen_cpu, gen_cuda)
    rows, ratios = summary(results)
    rows.insert(0, f"GEMM ceiling {gemm:.0f} TFLOP/s")
    Path(args.out).write_text(json.dumps(dict(device=device, torch=torch.__version__, triton=triton.__version__,
                                              command=" ".join(sys.argv), results=results, ratios=ratios), indent=1))
    if args.record:
        record(args.benchmarks, rows, ratios, device, "python " + " ".join(sys.argv))
    print("\n".join(rows))
