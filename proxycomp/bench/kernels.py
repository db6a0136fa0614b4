"""Benchmark proxycomp's Triton kernels on one GPU beside torch, all in one run.

Attention: TFLOP/s (FA convention: fwd 4*B*H*S^2*D, halved when causal; bwd 2.5x fwd) for ours, SDPA's
flash and cuDNN backends and flash-attn when importable. Document-masked runs (8 documents per
sequence, boundaries fixed by --seed): ours with block skipping, ours computing every causal block, and
SDPA with a dense boolean mask. Embedding fused with RMSNorm: forward+backward time beside torch's two ops.

    python tools/bench_kernels.py --out bench.json [--record] [--parts attention,embedding,sweep]

Each configuration is checked against SDPA (or torch) once before it is timed.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from proxycomp.benchmarks import add_benchmarks_option, append_block
from proxycomp.kernels.attention import AttentionConfig, default_config, document_bounds, flash_attention
from proxycomp.kernels.embedding import embedding_rmsnorm

ATTENTION_SHAPES = [(8, 16, 2048, 64), (4, 16, 4096, 128), (2, 16, 8192, 128)]
EMBEDDING_CASES = [(65536, 1024, 260), (65536, 1024, 8512)]
DOCS_PER_SEQUENCE = 8
PARTS = ("attention", "embedding", "sweep")  # --parts
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


def random_doc_ids(batch, seq, gen) -> torch.Tensor:
    cuts = torch.stack([torch.randperm(seq - 1, generator=gen)[: DOCS_PER_SEQUENCE - 1] + 1 for _ in range(batch)])
    marks = torch.zeros(batch, seq, dtype=torch.int64)
    marks.scatter_(1, cuts, 1)
    return marks.cumsum(1).cuda()


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
        del dense_mask, same_doc


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


SWEEP_ROUNDS = 3
# The byte models' attention shapes (proxycomp.bench.train: d768 has 12 heads and d1024 16, both of size 64, at
# T=4096) and the D=128 shape of the attention table.
SWEEP_SHAPES = [(8, 12, 4096, 64), (4, 16, 4096, 128)]
# (block_m, block_n, warps, stages) of the forward.
SWEEP_FWD = [(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3)]
# (dkdv key block, dkdv query step, dq query block, dq key block, warps, stages).
SWEEP_BWD = {
    64: [(64, 64, 64, 64, 4, 3), (128, 64, 128, 64, 8, 3), (64, 64, 64, 32, 4, 3), (64, 32, 64, 64, 4, 3),
         (128, 32, 128, 32, 4, 5), (128, 32, 128, 32, 4, 3), (128, 64, 128, 64, 4, 3), (64, 64, 64, 64, 4, 4)],
    128: [(128, 64, 128, 32, 8, 3), (128, 64, 128, 64, 8, 3), (128, 64, 64, 64, 8, 3), (128, 64, 128, 64, 8, 2)],
}


def sweep_attention(results: list, gen_cuda) -> None:
    """Time block configs at the models' shapes; the defaults in attention.py come from here.

    Every config is timed SWEEP_ROUNDS times, round-robin, and the median kept: timings drift over minutes of a
    device call (a single-pass sweep once timed one config at 174 and, minutes earlier, 259 TFLOP/s), and one pass
    per config lets that drift pick the winner. Forward configs are timed alone; backward configs as
    forward+backward with the default forward."""
    for batch, heads, seq, dim in SWEEP_SHAPES:
        q, k, v = make_qkv(batch, heads, seq, dim, gen_cuda)
        grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=gen_cuda)
        flops = attention_flops(batch, heads, seq, dim)
        base = default_config(dim, q.device)
        fields = [f.name for f in dataclasses.fields(AttentionConfig)]
        configs = [("sweep_fwd", c, dataclasses.replace(base, **dict(zip(fields[:4], c)))) for c in SWEEP_FWD]
        configs += [("sweep_fwd_bwd", c, dataclasses.replace(base, **dict(zip(fields[4:], c))))
                    for c in SWEEP_BWD[dim]]
        candidates = [(kind, variant, lambda q, k, v, cfg=cfg: flash_attention(q, k, v, config=cfg))
                      for kind, variant, cfg in configs]
        timings: dict[int, list[float]] = {}
        for i, (kind, variant, fn) in enumerate(candidates):
            try:
                check_grads(fn, sdpa(SDPBackend.FLASH_ATTENTION), q, k, v, grad_out)
            except Exception as exc:  # a config can exceed shared memory or registers: report and leave it out
                print(f"{kind} {(batch, heads, seq, dim)} {variant}: failed {type(exc).__name__}: {str(exc)[:80]}",
                      flush=True)
                continue
            timings[i] = []
        for _ in range(SWEEP_ROUNDS):
            for i in timings:
                kind, _, fn = candidates[i]
                timings[i].append(time_one(kind == "sweep_fwd", fn, q, k, v, grad_out))
        for i, times in timings.items():
            kind, variant, _ = candidates[i]
            ms = sorted(times)[len(times) // 2]
            tflops = (1.0 if kind == "sweep_fwd" else 3.5) * flops / ms * 1e-9
            results.append(dict(kind=kind, B=batch, H=heads, S=seq, D=dim, config=variant, ms=ms,
                                rounds_ms=times, tflops=tflops))
            print(f"{kind} {(batch, heads, seq, dim)} {variant}: {tflops:.0f} TFLOP/s (median of "
                  f"{', '.join(f'{t:.3f}' for t in times)} ms)", flush=True)


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
    for r in results:
        if r["kind"] in ("sweep_fwd", "sweep_fwd_bwd"):
            what = "fwd" if r["kind"] == "sweep_fwd" else "f+b"
            rows.append(f"sweep {what} {str((r['B'], r['H'], r['S'], r['D'])):18s} {str(tuple(r['config'])):38s} "
                        f"{r['tflops']:5.0f} TF/s")
    rows.append("ratios (x faster than): " + ", ".join(f"{k}={v:.2f}" for k, v in ratios.items()))
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
                             "sweep (attention block configs at the models' shapes)")
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
    del a
    if "attention" in parts:
        bench_attention(results, gen_cpu, gen_cuda)
    if "embedding" in parts:
        bench_embedding(results, gen_cuda)
    if "sweep" in parts:
        sweep_attention(results, gen_cuda)
    rows, ratios = summary(results)
    rows.insert(0, f"GEMM ceiling {gemm:.0f} TFLOP/s")
    Path(args.out).write_text(json.dumps(dict(device=device, torch=torch.__version__, triton=triton.__version__,
                                              command=" ".join(sys.argv), results=results, ratios=ratios), indent=1))
    if args.record:
        record(args.benchmarks, rows, ratios, device, "python " + " ".join(sys.argv))
    print("\n".join(rows))
