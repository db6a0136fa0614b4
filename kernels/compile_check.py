"""Compile every kernel of this package for Hopper (sm_90) without a GPU.

Triton's interpreter, which the CPU tests use, skips the compiler's checks (loop-carried types, layouts,
shared-memory limits), so a kernel can pass every CPU test and still fail to build on the GPU. This
module builds each kernel with the configs the launchers use, through Triton's bundled ptxas, and fails where a
forward build would re-read q at every key block (q_reloads). Each build's line gives its registers and stack
(spills) as cuobjdump reads them:

    python -m proxycomp.kernels.compile_check      # TRITON_INTERPRET must be unset

Pointers and strides are declared 16-byte aligned, as Triton's launcher specializes them on real
inputs, so the build takes the same path (software pipelining included) as on the device. So is an int argument
equal to 1, which Triton builds as a constant: the attention's GROUP (query heads per key/value head) without
grouped-query heads, the model's default; the grouped-query builds, GROUP a runtime int, come apart.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import torch


def _compile(fn, types: dict[str, str], constexprs: dict, num_warps: int, num_stages: int):
    """The built kernel (its `asm` holds each stage's text) and the seconds the build took."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    signature = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
               if signature[n].startswith("*") or (signature[n] == "i32" and n.startswith("s"))}
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


def attention_builds(head_dim: int):
    """Each pass as the launchers run it with documents: the default config's launches (one per pass, or its long
    tiles in the pass's blocks and its short tiles in the short blocks), and the short tiles' launches where the
    default leaves them off, since a config may turn them on; and the forward without documents. Each with RoPE, as
    the model runs them: without it, a pass only loses its rotation (of q in the forward, of dq or dk as the
    backward's passes store them)."""
    from . import attention as A

    default = A.default_config(head_dim, torch.device("cuda"))
    short = A.with_short_tiles(default, head_dim)
    configs = [default] if short == default else [default, short]
    # GROUP=1: one key/value head per query head, which Triton builds as a constant (module docstring).
    flags = dict(HEAD_DIM=head_dim, CAUSAL=True, HAS_DOCS=True, SKIP=True, FP32_DOT=False, GROUP=1)
    qkv = {**_pointers("bf16", "Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "QR"), **_pointers("fp32", "LSE", "DELTA"),
           **_pointers("i32", "DOC_START", "DOC_END"), **_pointers("fp32", "COS", "SIN"), "qk_scale2": "fp32",
           "sm_scale": "fp32"}
    # Without documents only the forward builds otherwise (the backward's passes only drop their bounds): Triton
    # 3.6's ptxas crashed on its TMA build at 2 stages, which the launcher's fwd_stages avoids. With grouped-query
    # heads GROUP is a runtime int, and the dk/dv pass loops over a group's query heads.
    for cfg, has_docs, grouped in [*((cfg, True, False) for cfg in configs), (default, False, False),
                                   (default, True, True)]:
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
                launch = f"attention {name} {('single launch', 'long tiles', 'short tiles')[tiles]}" + (
                    "" if has_docs else " without documents") + (" with grouped-query heads" if grouped else "")
                constexprs = {rows: tile, step: tile_step, "SUPER": block, "TILES": tiles, **own, **flags,
                              "HAS_DOCS": has_docs, "TILE_GROUP": cfg.tile_group}
                if grouped:
                    del constexprs["GROUP"]
                if descs is None:
                    yield launch, fn, qkv, constexprs, tile_warps, tile_stages
                    continue
                # With TMA where the inputs allow it, and through pointers where they do not (or tma is off); each
                # at the stages the launcher gives it.
                if cfg.tma:
                    types = {**qkv, **{arg: f"tensordesc<bf16[{tile if r == 'row' else tile_step}, {head_dim}]>"
                                       for arg, r in descs.items()}}
                    yield (f"{launch} tma", fn, types, {**constexprs, "TMA": True}, tile_warps,
                           A.fwd_stages(tile_stages, rope=True, has_docs=has_docs, tma=True))
                yield (f"{launch} pointers", fn, qkv, {**constexprs, "TMA": False, **dict.fromkeys(descs)},
                       tile_warps, A.fwd_stages(tile_stages, rope=True, has_docs=has_docs, tma=False))
    # The dk/dv pass with its masked loops unpipelined, the sweep's alternative to the default's spills.
    yield ("attention dkdv masked loops at 1 stage", A._attn_bwd_dkdv_kernel, qkv,
           {**flags, "BLOCK_N": default.dkdv_block_n, "BLOCK_M": default.dkdv_block_m, "SUPER": default.dkdv_block_n,
            "TILES": 0, "ROPE": True, "MASKED_STAGES": 1, "TILE_GROUP": default.tile_group}, default.bwd_warps,
           default.bwd_stages)


def embedding_builds():
    from . import embedding as E

    ids = {**_pointers("i64", "IDS", "PERM"), **_pointers("i16", "KEYS"), **_pointers("i32", "OK", "ROW_START")}
    yield ("embedding+rmsnorm fwd", E._embedding_rmsnorm_fwd_kernel,
           {**ids, **_pointers("bf16", "W", "NORM_W", "X", "Y"), "eps": "fp32"}, dict(BLOCK_T=8, BLOCK_D=1024), 4, 3)
    for grads, precision in (("bf16", "native"), ("fp32", "tf32x3")):  # fp32: a model trained in bf16-mixed
        yield (f"embedding bwd segment sums, {grads} grads", E._segment_sums_kernel,
               {**ids, **_pointers(grads, "GRAD_X", "GRAD_Y"),
                **_pointers("fp32", "SLOTS_X", "SLOTS_Y", "OUT_X", "OUT_Y")},
               dict(CHUNK=512, PRECISION=precision, BLOCK_T=E.BLOCK_T, BLOCK_D=128), 4, 3)
    yield ("embedding bwd finish rows", E._finish_rows_kernel, {**ids, **_pointers("fp32", "SLOTS", "OUT")},
           dict(CHUNK=512, BLOCK_C=E.BLOCK_C, BLOCK_R=E.BLOCK_R, BLOCK_D=128), 4, 3)
    yield ("embedding+rmsnorm bwd rows", E._rmsnorm_rows_bwd_kernel,
           {**_pointers("fp32", "SUM_X", "SUM_Y", "DG_PART"), **_pointers("bf16", "W", "NORM_W", "DW"), "eps": "fp32"},
           dict(BLOCK_R=4, BLOCK_D=1024), 4, 3)


def main() -> int:
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("compile_check: unset TRITON_INTERPRET (the interpreter replaces the kernels it would build)")
        return 2
    builds = [*attention_builds(64), *attention_builds(128), *embedding_builds()]
    failed = 0
    for name, fn, types, constexprs, warps, stages in builds:
        kernel, seconds = _compile(fn, types, constexprs, warps, stages)
        print(f"built {name} for sm_90 ({', '.join(f'{k}={v}' for k, v in constexprs.items())}) in {seconds:.1f}s: "
              f"{resources(kernel)}")
        if name.startswith("attention fwd") and (reloads := q_reloads(kernel.asm["ttgir"])):
            print(f"  but {reloads} of its loops reload q into registers for q·kᵀ at every key block")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
