"""Compile every kernel of this package for Hopper (sm_90) without a GPU.

Triton's interpreter, which the CPU tests use, skips the compiler's checks (loop-carried types, layouts,
shared-memory limits), so a kernel can pass every CPU test and still fail to build on the GPU. This
module builds each kernel with the configs the launchers use, through Triton's bundled ptxas, and fails where a
forward build would re-read q at every key block (q_reloads). Each build's line gives its registers and stack
(spills) as cuobjdump reads them:

    python -m proxycomp.kernels.compile_check      # TRITON_INTERPRET must be unset

Arguments are declared as Triton's launcher specializes them on real inputs, so that a build takes the same path
(software pipelining included) as on the device: pointers and strides 16-byte aligned, and each int argument whose
value a launch fixes (sequence length, heads, query heads per key/value head) by its value at the models' shapes, a
multiple of 16 declared so and a 1 built as a constant. Beside those, the builds a user's shapes reach: grouped-query
heads (GROUP a runtime int, over which the dk/dv pass loops) and a sequence length that is no multiple of 16.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import torch


def _compile(fn, types: dict[str, str], constexprs: dict, num_warps: int, num_stages: int,
             ints: dict[str, int] | None = None):
    """The built kernel (its `asm` holds each stage's text) and the seconds the build took. `ints`: values of int
    arguments, specialized as Triton's launcher does (1: a constant; a multiple of 16: declared so)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    ints = ints or {}
    constexprs = {**constexprs, **{n: 1 for n, value in ints.items() if value == 1}}
    signature = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
               if signature[n].startswith("*") or (signature[n] == "i32" and (n.startswith("s") or
                                                                              ints.get(n, 1) % 16 == 0))}
    source = ASTSource(fn, signature, constexprs={(names.index(k),): v for k, v in constexprs.items()}, attrs=aligned)
    start = time.perf_counter()
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=num_warps, num_stages=num_stages))
    return kernel, time.perf_counter() - start


def resources(kernel) -> str:
    """Registers a thread and stack bytes (spills, where above 0) of a build, as cuobjdump reads its cubin."""
    import triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-res-usage", cubin.name], capture_output=True,
                               text=True, check=True).stdout
    found = dict(re.findall(r"(REG|STACK):(\d+)", usage))
    return f"{found['REG']} registers, {found['STACK']} B stack"


def q_reloads(ttgir: str) -> int:
    """In a forward built with Hopper's wgmma, how many key-block loops move q from shared memory into registers for
    q·kᵀ. wgmma reads its first operand from shared memory or registers; q is loop-invariant, and kept in shared
    memory the matmul reads it there. Given as registers (q rotated in the kernel), Triton 3.6 re-reads it at every
    key block and the build takes ~60 more registers per thread (one block fewer per multiprocessor), which cost
    the rotating forward ~15% on the H100. Builds of smaller tiles use mma.sync, whose operands are registers."""
    if "ttng.warp_group_dot" not in ttgir:
        return 0
    return sum("ttg.local_load" in line and "opIdx = 0" in line for line in ttgir.splitlines())


def _pointers(dtype: str, *names: str) -> dict[str, str]:
    return {name: f"*{dtype}" for name in names}


# The int arguments a launch fixes, at the shapes the builds stand for: the d768 byte model's attention (12 heads of
# 64) and the benchmarks' head size 128 (16 heads), at the models' context, without grouped-query heads.
MODEL_INTS = {64: dict(H=12, S=4096, GROUP=1), 128: dict(H=16, S=4096, GROUP=1)}


def attention_builds(head_dim: int):
    """Each pass as the launchers run it with documents: the default config's launches (one per pass, or its long
    tiles in the pass's blocks and its short tiles in the short blocks), and the short tiles' launches where the
    default leaves them off, since a config may turn them on; the forward without documents; and the default's
    single launches with grouped-query heads and at a length that is no multiple of 16. Each with RoPE, as the model
    runs them: without it, a pass only loses its rotation (of q in the forward, of dq or dk as the backward's passes
    store them)."""
    from . import attention as A

    default = A.default_config(head_dim, torch.device("cuda"))
    short = A.with_short_tiles(default, head_dim)
    configs = [default] if short == default else [default, short]
    flags = dict(HEAD_DIM=head_dim, CAUSAL=True, HAS_DOCS=True, SKIP=True, FP32_DOT=False)
    qkv = {**_pointers("bf16", "Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "QR"), **_pointers("fp32", "LSE", "DELTA"),
           **_pointers("i32", "DOC_START", "DOC_END"), **_pointers("fp32", "COS", "SIN"), "qk_scale2": "fp32",
           "sm_scale": "fp32"}
    model = MODEL_INTS[head_dim]
    # Without documents only the forward builds otherwise (the backward's passes only drop their bounds): Triton
    # 3.6's ptxas crashed on its TMA build at 2 stages, which the launcher's fwd_stages avoids.
    variants = [*((cfg, True, model, "") for cfg in configs), (default, False, model, " without documents"),
                (default, True, {**model, "GROUP": 4}, " with grouped-query heads"),
                (default, True, {**model, "S": model["S"] - 1}, " at a length no multiple of 16")]
    for cfg, has_docs, ints, words in variants:
        # The forward's TMA loads: descriptor argument -> rows per block ("row" or "step").
        passes = [("fwd", A._attn_fwd_kernel, "BLOCK_M", "BLOCK_N", cfg.fwd_block_m, cfg.fwd_block_n, cfg.fwd_warps,
                   cfg.fwd_stages, dict(TAIL_FIRST=bool(cfg.fwd_tail_first), ROPE=True),
                   dict(QD="row", KD="step", VD="step")),
                  ("dkdv", A._attn_bwd_dkdv_kernel, "BLOCK_N", "BLOCK_M", cfg.dkdv_block_n, cfg.dkdv_block_m,
                   cfg.bwd_warps, cfg.bwd_stages, dict(ROPE=True, MASKED_STAGES=cfg.dkdv_masked_stages), None),
                  ("dq", A._attn_bwd_dq_kernel, "BLOCK_M", "BLOCK_N", cfg.dq_block_m, cfg.dq_block_n, cfg.bwd_warps,
                   cfg.bwd_stages, dict(ROPE=True), None)]
        for name, fn, rows, step, block, block_step, warps, stages, own, descs in passes[:None if has_docs else 1]:
            for tile, tile_step, tile_warps, tile_stages, tiles in A._launches(
                    cfg, block, block_step, warps, stages, short=has_docs and cfg.short_span > 0):
                launch = f"attention {name} {('single launch', 'long tiles', 'short tiles')[tiles]}{words}"
                constexprs = {rows: tile, step: tile_step, "SUPER": block, "TILES": tiles, **own, **flags,
                              "HAS_DOCS": has_docs, "TILE_GROUP": cfg.tile_group}
                if descs is None:
                    yield launch, fn, qkv, constexprs, tile_warps, tile_stages, ints
                    continue
                # With TMA where the inputs allow it (_tma_layout: whole blocks), and through pointers where they
                # do not (or tma is off); each at the stages the launcher gives it.
                if cfg.tma and ints["S"] % tile == 0 and ints["S"] % tile_step == 0:
                    types = {**qkv, **{arg: f"tensordesc<bf16[{tile if r == 'row' else tile_step}, {head_dim}]>"
                                       for arg, r in descs.items()}}
                    yield (f"{launch} tma", fn, types, {**constexprs, "TMA": True}, tile_warps,
                           A.fwd_stages(tile_stages, rope=True, has_docs=has_docs, tma=True), ints)
                yield (f"{launch} pointers", fn, qkv, {**constexprs, "TMA": False, **dict.fromkeys(descs)},
                       tile_warps, A.fwd_stages(tile_stages, rope=True, has_docs=has_docs, tma=False), ints)
    # The dk/dv pass with its masked loops unpipelined, the sweep's alternative to the default's spills.
    yield ("attention dkdv masked loops at 1 stage", A._attn_bwd_dkdv_kernel, qkv,
           {**flags, "BLOCK_N": default.dkdv_block_n, "BLOCK_M": default.dkdv_block_m, "SUPER": default.dkdv_block_n,
            "TILES": 0, "ROPE": True, "MASKED_STAGES": 1, "TILE_GROUP": default.tile_group}, default.bwd_warps,
           default.bwd_stages, model)


def embedding_builds():
    from . import embedding as E

    ids = {**_pointers("i64", "IDS", "PERM"), **_pointers("i16", "KEYS"), **_pointers("i32", "OK", "ROW_START")}
    yield ("embedding+rmsnorm fwd", E._embedding_rmsnorm_fwd_kernel,
           {**ids, **_pointers("bf16", "W", "NORM_W", "X", "Y"), "eps": "fp32"}, dict(BLOCK_T=8, BLOCK_D=1024), 4, 3,
           {})
    for grads, precision in (("bf16", "native"), ("fp32", "tf32x3")):  # fp32: a model trained in bf16-mixed
        yield (f"embedding bwd segment sums, {grads} grads", E._segment_sums_kernel,
               {**ids, **_pointers(grads, "GRAD_X", "GRAD_Y"),
                **_pointers("fp32", "SLOTS_X", "SLOTS_Y", "OUT_X", "OUT_Y")},
               dict(CHUNK=512, PRECISION=precision, BLOCK_T=E.BLOCK_T, BLOCK_D=128), 4, 3, {})
    yield ("embedding bwd finish rows", E._finish_rows_kernel, {**ids, **_pointers("fp32", "SLOTS", "OUT")},
           dict(CHUNK=512, BLOCK_C=E.BLOCK_C, BLOCK_R=E.BLOCK_R, BLOCK_D=128), 4, 3, {})
    yield ("embedding+rmsnorm bwd rows", E._rmsnorm_rows_bwd_kernel,
           {**_pointers("fp32", "SUM_X", "SUM_Y", "DG_PART"), **_pointers("bf16", "W", "NORM_W", "DW"), "eps": "fp32"},
           dict(BLOCK_R=4, BLOCK_D=1024), 4, 3, {})


def main() -> int:
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("compile_check: unset TRITON_INTERPRET (the interpreter replaces the kernels it would build)")
        return 2
    builds = [*attention_builds(64), *attention_builds(128), *embedding_builds()]
    failed = 0
    for name, fn, types, constexprs, warps, stages, ints in builds:
        kernel, seconds = _compile(fn, types, constexprs, warps, stages, ints)
        print(f"built {name} for sm_90 ({', '.join(f'{k}={v}' for k, v in {**constexprs, **ints}.items())}) in "
              f"{seconds:.1f}s: {resources(kernel)}")
        if name.startswith("attention fwd") and (reloads := q_reloads(kernel.asm["ttgir"])):
            print(f"  but {reloads} of its loops reload q into registers for q·kᵀ at every key block")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
