"""Causal flash attention with GQA and document masking: Triton forward and backward.

Layers: `@triton.jit` kernels; launchers (`_launch_fwd`, `_launch_bwd`); one autograd.Function over them, which
under torch.compile reaches them through the ops `proxycomp::flash_attn_fwd` and `proxycomp::flash_attn_bwd`
(opaque to the compiler) and in eager code calls them directly; and the entry point `flash_attention`, which checks
the inputs and picks blocks.

Documents. `doc_ids` (B, S) gives each position a document id; a query attends only keys in the same
maximal run of equal ids. Packing makes ids non-decreasing, where a run is exactly "same id"; defining
documents as runs means the launcher needs no host sync to check monotonicity. From the ids the
launcher derives, per position, the first and one-past-last position of its document. A block of
queries then only visits keys in [first key of its first query's document, last query] (causal), so
blocks wholly before the document are skipped, not computed and masked.

Short documents. A tile of 128 queries that holds several short documents spends most of its work on pairs it
masks, and its few key blocks are too short a loop to hide the pipeline's fill. With documents, each pass can run
in two launches over the same rows: the configured blocks take the "long" tiles, and smaller blocks take the
tiles whose document span (the keys the big tile would visit, or the queries for a key tile) is at most
`short_span`. Every program of both launches classifies its big tile from the document bounds on the device and
returns at once if the tile belongs to the other launch: no host sync, and each row is written by one program.
Measured, it pays only at head size 128 with 32-128 documents per row, and only on the GPU (SHORT_TILES).

Launch order. Causal tiles differ in work by up to the sequence's length in blocks, and the GPU starts programs in
grid order. In each row's own order the longest tiles of the last rows start near the end of the launch and run on
an otherwise idle GPU; `AttentionConfig.tile_group` interleaves the rows in groups, longest tiles first across a
group (_tile), small enough that a group's k and v stay in L2.

Each kernel walks its key (or query) range in three phases: a masked head (document boundary), an
unmasked middle, and a masked tail (diagonal / sequence end / document end). Only the phases that
can hold masked entries pay for the mask.

Phase order. With documents, a block's range comes from the bounds a program loads first, and a loop whose range
is not known cannot issue its first loads: each program would wait one memory round trip before any key block.
Causal, the diagonal phase depends on the block's position alone, so the kernels walk it first (the forward and dq
passes walk their key phases tail, middle, head; the online softmax takes key blocks in any order) and the bounds
arrive behind its work.

RoPE. Given its angles, the entry point takes q and k before RoPE. k is rotated before the forward (under
torch.compile by an elementwise kernel the compiler makes); q by the forward kernel, which loads each query row
once, stores it rotated for the backward and reads it back (so that its matmuls find it in shared memory); and the
backward's kernels turn dq and dk back through the rotation as they store them. Rotated by the model instead, q
and k cost a pass that reads and writes both in each direction.

Scores are kept in the log2 domain: log2(e) is folded into the scale so the softmax uses exp2, and
the saved row statistic is lse2 = max + log2(sum).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import torch
import triton
import triton.language as tl

from .launch_checks import KernelInputError, check_device, check_rank, interpreting
from .launching import Launcher, TensorDescriptor, cdiv
from .ops import define_op
from .reference import apply_rope

LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------
@triton.jit
def _dot(a, b, FP32_DOT: tl.constexpr):
    # Triton's interpreter computes bf16 dots wrongly (checked with triton 3.9); upcasting there keeps
    # the CPU tests meaningful. Compiled kernels always take the native path.
    if FP32_DOT:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32))
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _doc_bounds(DOC_START, DOC_END, base, offs, first, last, S, HAS_DOCS: tl.constexpr):
    """Per-row document [start, end) for positions `offs`, plus those of the block's first/last valid row."""
    if HAS_DOCS:
        ok = offs < S
        start = tl.load(DOC_START + base + offs, mask=ok, other=0)
        end = tl.load(DOC_END + base + offs, mask=ok, other=S)
        start_first = tl.load(DOC_START + base + first)
        start_last = tl.load(DOC_START + base + last)
        end_first = tl.load(DOC_END + base + first)
        end_last = tl.load(DOC_END + base + last)
    else:
        start = tl.zeros_like(offs)
        end = start + S
        start_first = first * 0
        start_last = start_first
        end_first = start_first + S
        end_last = end_first
    return start, end, start_first, start_last, end_first, end_last


@triton.jit
def _short_tile(DOC_START, DOC_END, base, t0, S, short_span, SUPER: tl.constexpr, CAUSAL: tl.constexpr,
                KEY_SIDE: tl.constexpr):
    """Whether the big tile (SUPER rows) holding row t0 is short: the range it would walk is at most `short_span`
    positions, keys [start(first), last] for queries, queries [first, end(last)) for keys (causal; non-causal
    spans both documents' bounds)."""
    s0 = (t0 // SUPER) * SUPER
    s_last = tl.minimum(s0 + SUPER, S) - 1
    if KEY_SIDE:
        hi = tl.load(DOC_END + base + s_last)
        lo = s0
        if not CAUSAL:
            lo = tl.load(DOC_START + base + s0)
    else:
        lo = tl.load(DOC_START + base + s0)
        hi = s_last + 1
        if not CAUSAL:
            hi = tl.load(DOC_END + base + s_last)
    return hi - lo <= short_span


@triton.jit
def _tile(TILE_GROUP: tl.constexpr):
    """This program's (block, row) in launch order, and the number of blocks a row has. The grid's rows (batch x
    heads) are taken TILE_GROUP at a time, and a group launches block 0 of each of its rows, then block 1, and so on.
    Each pass numbers its blocks so that block 0 is its longest causal tile at one document a row (the forward and dq
    passes count them from the sequence's end), so the longest tiles of a group start first, across its rows,
    instead of those of the last rows starting near the end of the launch and running alone. Groups stay small so
    that the k and v (or q and do) their programs read can stay in L2: all 96 rows of the d768 shape at once ran
    fwd+bwd 3-11% slower than one at a time (BENCHMARKS.md, 2026-12-07). The grid itself is (row in group, block,
    group) (_grid), since the GPU starts programs in the order of their ids, x first: block and row are program ids,
    which the compiler re-reads after a loop instead of keeping them live (the same order mapped from one linear id
    cost the dk/dv pass 96 B of stack where this costs 8, in the grouped-query build compile_check then read). At 1
    the grid is (block, row), each row's blocks in turn."""
    if TILE_GROUP == 1:
        return tl.program_id(0), tl.program_id(1), tl.num_programs(0)
    return tl.program_id(1), tl.program_id(2) * TILE_GROUP + tl.program_id(0), tl.num_programs(1)


@triton.jit
def _visible(m, n, start, end, CAUSAL: tl.constexpr, KEY_SIDE: tl.constexpr = False):
    """Query m sees key n. `start`/`end` bound the document of the query (or, KEY_SIDE, of the key).

    Causal attention needs one document test, not two: n <= m and a shared document reduce to n >= start(m)
    (equivalently m < end(n)), as keys before a query's document are the only earlier ones outside it."""
    if CAUSAL:
        if KEY_SIDE:
            ok = (m < end) & (n <= m)
        else:
            ok = (n >= start) & (n <= m)
    else:
        if KEY_SIDE:
            ok = (m >= start) & (m < end)
        else:
            ok = (n >= start) & (n < end)
    return ok


@triton.jit
def _key_phases(m0, last, start_first, start_last, end_first, end_last, S,
                BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, SKIP: tl.constexpr):
    """Key ranges for a query block: masked [lo, mid_lo), unmasked [mid_lo, tail_lo), masked [tail_lo, hi).

    Causal, the masked tail (the diagonal) depends on m0 alone, not on the document bounds: the kernels walk it first,
    so its loads go out while the bounds' loads are in flight, instead of every program waiting for them before its
    first key block (module docstring: Phase order)."""
    if CAUSAL:
        hi = last + 1
        # Key blocks that end at or before the first row are visible to every row of a shared document. The diagonal
        # starts at or after lo: the first row's document starts at or before m0.
        tail_lo = ((m0 + 1) // BLOCK_N) * BLOCK_N
    else:
        if SKIP:
            hi = end_last
        else:
            hi = end_last * 0 + S
    if SKIP:
        lo = (start_first // BLOCK_N) * BLOCK_N
    else:
        lo = start_first * 0
    full_lo = tl.minimum(tl.cdiv(start_last, BLOCK_N) * BLOCK_N, hi)
    if not CAUSAL:
        tail_lo = tl.maximum((tl.minimum(end_first, S) // BLOCK_N) * BLOCK_N, full_lo)
    mid_lo = tl.minimum(full_lo, tail_lo)
    return lo, mid_lo, tail_lo, hi


@triton.jit
def _slice_at(b, h, sb, sh, ss):
    """Where the (b, h) slice of a (B, H, S, D) tensor starts in the matrix of row stride `ss` that a tensor
    descriptor reads it as (_tma_layout): (row, column)."""
    off = b * sb + h * sh
    return off // ss, off % ss


@triton.jit
def _key_tiles(k_base, v_base, sks, svs, kd, vd, k_at, v_at, n0, S, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
               MASKED: tl.constexpr, TMA: tl.constexpr):
    """The forward's key block at n0, transposed (HEAD_DIM, BLOCK_N), and its value block (BLOCK_N, HEAD_DIM). TMA:
    through the descriptors, whose blocks never cross S (_tma_layout)."""
    if TMA:
        kt = tl.trans(kd.load([k_at[0] + n0, k_at[1]]))
        v = vd.load([v_at[0] + n0, v_at[1]])
    else:
        offs_n = n0 + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        kt_ptrs = k_base + offs_n[None, :] * sks + offs_d[:, None]
        v_ptrs = v_base + offs_n[:, None] * svs + offs_d[None, :]
        if MASKED:
            kt = tl.load(kt_ptrs, mask=offs_n[None, :] < S, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < S, other=0.0)
        else:
            kt = tl.load(kt_ptrs)
            v = tl.load(v_ptrs)
    return kt, v


@triton.jit
def _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, kd, vd, k_at, v_at, offs_m, start_q, end_q, lo, hi, S,
                qk_scale2, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                FP32_DOT: tl.constexpr, TMA: tl.constexpr):
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kt, v = _key_tiles(k_base, v_base, sks, svs, kd, vd, k_at, v_at, n0, S, HEAD_DIM, BLOCK_N, MASKED, TMA)
        s = _dot(q, kt, FP32_DOT)
        if MASKED:
            s = tl.where(_visible(offs_m[:, None], offs_n[None, :], start_q[:, None], end_q[:, None], CAUSAL), s,
                         float("-inf"))
        # The scale is > 0, so max(s) * scale is the scaled max and the exponent below is one FMA per score.
        # m_i starts finite (-1e30), so a row whose keys are all masked here gets p = 0 and alpha = 1.
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale2)
        p = tl.exp2(s * qk_scale2 - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, FP32_DOT)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _rope_rows(x, cos_base, sin_base, rows, ok, scs, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr,
               INVERSE: tl.constexpr):
    """RoPE on rows x (ROWS, HEAD_DIM) in float32: each pair (x1, x2) of the two halves turned by its row's angle,
    (x1 cos - x2 sin, x2 cos + x1 sin). INVERSE turns by minus the angle, which is RoPE's transpose: the gradient
    of the rows before RoPE from that of the rotated rows."""
    HALF: tl.constexpr = HEAD_DIM // 2
    at = rows[:, None] * scs + tl.arange(0, HALF)[None, :]
    c = tl.load(cos_base + at, mask=ok[:, None], other=0.0)
    s = tl.load(sin_base + at, mask=ok[:, None], other=0.0)
    if INVERSE:
        s = -s
    x1, x2 = tl.split(tl.permute(tl.reshape(x, [ROWS, 2, HALF]), [0, 2, 1]))
    return tl.reshape(tl.permute(tl.join(x1 * c - x2 * s, x2 * c + x1 * s), [0, 2, 1]), [ROWS, HEAD_DIM])


@triton.jit
def _attn_fwd_kernel(
    Q, K, V, O, LSE, DOC_START, DOC_END, QD, KD, VD, COS, SIN, QR,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, scb, scs, sqrb, sqrh, sqrs,
    H, S, qk_scale2, short_span,
    GROUP, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_DOCS: tl.constexpr, SKIP: tl.constexpr, FP32_DOT: tl.constexpr,
    SUPER: tl.constexpr, TILES: tl.constexpr, TAIL_FIRST: tl.constexpr, TMA: tl.constexpr, ROPE: tl.constexpr,
    TILE_GROUP: tl.constexpr,
):
    """One query block. TMA: q, k and v come through the tensor descriptors QD, KD, VD (else None). ROPE: q is
    given before RoPE (k after): the block rotates its rows once, stores them in QR for the backward and reads them
    back from there."""
    # Causal blocks further down the sequence do more work: launch them first for a shorter tail.
    block, pid_bh, blocks = _tile(TILE_GROUP)
    pid_m = blocks - 1 - block
    b = pid_bh // H
    h = pid_bh % H
    hkv = h // GROUP
    m0 = pid_m * BLOCK_M
    if TILES != 0:  # 1: this launch takes the long tiles, 2: the short ones
        if _short_tile(DOC_START, DOC_END, b * S, m0, S, short_span, SUPER, CAUSAL, False) == (TILES == 1):
            return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < S
    last = tl.minimum(m0 + BLOCK_M, S) - 1

    if TMA:
        q_at = _slice_at(b, h, sqb, sqh, sqs)
        k_at = _slice_at(b, hkv, skb, skh, sks)
        v_at = _slice_at(b, hkv, svb, svh, svs)
        q = QD.load([q_at[0] + m0, q_at[1]])
    else:
        k_at = (0, 0)
        v_at = (0, 0)
        q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if ROPE:
        q = _rope_rows(q.to(tl.float32), COS + b * scb, SIN + b * scb, offs_m, row_ok, scs, BLOCK_M, HEAD_DIM,
                       False).to(QR.dtype.element_ty)
        qr_at = QR + b * sqrb + h * sqrh + offs_m[:, None] * sqrs + offs_d[None, :]
        tl.store(qr_at, q, mask=row_ok[:, None])
        # Read back what the block just stored (the barrier orders the two): Triton keeps a loaded q in shared
        # memory, where each q·kᵀ reads it, but copies rotated registers in for every key block, at ~60 more
        # registers per thread (compile_check.q_reloads).
        tl.debug_barrier()
        q = tl.load(qr_at, mask=row_ok[:, None], other=0.0)
    start_q, end_q, start_first, start_last, end_first, end_last = _doc_bounds(
        DOC_START, DOC_END, b * S, offs_m, m0, last, S, HAS_DOCS)
    lo, mid_lo, tail_lo, hi = _key_phases(m0, last, start_first, start_last, end_first, end_last, S,
                                          BLOCK_N, CAUSAL, SKIP)

    k_base = K + b * skb + hkv * skh
    v_base = V + b * svb + hkv * svh
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30
    # The online softmax takes key blocks in any order: the masked tail first (_key_phases), or in position order
    # (AttentionConfig.fwd_tail_first).
    if TAIL_FIRST:
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, KD, VD, k_at, v_at, offs_m, start_q,
                                    end_q, tail_lo, hi, S, qk_scale2, HEAD_DIM, BLOCK_N, True, CAUSAL, FP32_DOT, TMA)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, KD, VD, k_at, v_at, offs_m, start_q,
                                end_q, lo, mid_lo, S, qk_scale2, HEAD_DIM, BLOCK_N, True, CAUSAL, FP32_DOT, TMA)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, KD, VD, k_at, v_at, offs_m, start_q,
                                end_q, mid_lo, tail_lo, S, qk_scale2, HEAD_DIM, BLOCK_N, False, CAUSAL, FP32_DOT, TMA)
    if not TAIL_FIRST:
        acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, sks, svs, KD, VD, k_at, v_at, offs_m, start_q,
                                    end_q, tail_lo, hi, S, qk_scale2, HEAD_DIM, BLOCK_N, True, CAUSAL, FP32_DOT, TMA)

    out = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + pid_bh * S + offs_m, m_i + tl.log2(l_i), mask=row_ok)


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqs, sdos, offs_n, start_k, end_k,
                 lo, hi, S, qk_scale2, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
                 CAUSAL: tl.constexpr, FP32_DOT: tl.constexpr, STAGES: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    # STAGES 0: the launch's num_stages (the same build as a plain range).
    for m0 in tl.range(lo, hi, BLOCK_M, num_stages=STAGES if STAGES > 0 else None):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        qt_ptrs = q_base + offs_m[None, :] * sqs + offs_d[:, None]
        do_ptrs = do_base + offs_m[:, None] * sdos + offs_d[None, :]
        if MASKED:
            ok_m = offs_m < S
            qt = tl.load(qt_ptrs, mask=ok_m[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=ok_m[:, None], other=0.0)
            lse = tl.load(lse_base + offs_m, mask=ok_m, other=0.0)
            delta = tl.load(delta_base + offs_m, mask=ok_m, other=0.0)
        else:
            qt = tl.load(qt_ptrs)
            do = tl.load(do_ptrs)
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        pt = tl.exp2(_dot(k, qt, FP32_DOT) * qk_scale2 - lse[None, :])
        if MASKED:
            pt = tl.where(_visible(offs_m[None, :], offs_n[:, None], start_k[:, None], end_k[:, None], CAUSAL,
                                   KEY_SIDE=True), pt, 0.0)
        dv += _dot(pt.to(do.dtype), do, FP32_DOT)
        dpt = _dot(v, tl.trans(do), FP32_DOT)
        dst = (pt * (dpt - delta[None, :])).to(qt.dtype)
        dk += _dot(dst, tl.trans(qt), FP32_DOT)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, DOC_START, DOC_END, COS, SIN,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos,
    sdkb, sdkh, sdks, sdvb, sdvh, sdvs, scb, scs,
    H, S, qk_scale2, sm_scale, short_span,
    GROUP, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_DOCS: tl.constexpr, SKIP: tl.constexpr, FP32_DOT: tl.constexpr,
    SUPER: tl.constexpr, TILES: tl.constexpr, ROPE: tl.constexpr, MASKED_STAGES: tl.constexpr,
    TILE_GROUP: tl.constexpr,
):
    """One key block of one kv head: accumulates over every query head of its GQA group, so no atomics.

    dq has its own pass (_attn_bwd_dq_kernel), which recomputes p and dp: 7 matmuls per block pair against 5
    for adding dq here with float32 atomics. Measured on the H200 (BENCHMARKS.md, 2026-12-03), the atomic
    variant was slower at head size 64 (288 vs 311 TFLOP/s fwd+bwd) and no faster at 128, so it was removed. On
    H100s (2026-12-06, seventh session) such a pass with 64-query steps and TMA reduce-adds beat the two passes
    alone by 8-19%, and lost once the float32 buffer's delta, zero-fill and conversion kernels were counted."""
    block, pid_bh, _ = _tile(TILE_GROUP)
    n0 = block * BLOCK_N
    hkv_count = H // GROUP
    b = pid_bh // hkv_count
    hkv = pid_bh % hkv_count
    if TILES != 0:  # 1: this launch takes the long tiles, 2: the short ones
        if _short_tile(DOC_START, DOC_END, b * S, n0, S, short_span, SUPER, CAUSAL, True) == (TILES == 1):
            return
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = offs_n < S
    last = tl.minimum(n0 + BLOCK_N, S) - 1

    k = tl.load(K + b * skb + hkv * skh + offs_n[:, None] * sks + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(V + b * svb + hkv * svh + offs_n[:, None] * svs + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    start_k, end_k, kstart_first, kstart_last, kend_first, kend_last = _doc_bounds(
        DOC_START, DOC_END, b * S, offs_n, n0, last, S, HAS_DOCS)

    # Query ranges for this key block, mirroring _key_phases: masked / unmasked / masked. Causal, the masked head
    # (the diagonal) depends on n0 alone, so its loads need not wait for the document bounds' (_key_phases); where
    # it reaches past the last key's document end, the mask zeroes those queries.
    if SKIP:
        hi = kend_last
    else:
        hi = n0 * 0 + S
    if CAUSAL:
        lo = n0
        full_lo = tl.minimum(tl.cdiv(last, BLOCK_M) * BLOCK_M, S)
    else:
        if SKIP:
            lo = kstart_first
        else:
            lo = n0 * 0
        full_lo = tl.minimum(tl.cdiv(kstart_last, BLOCK_M) * BLOCK_M, hi)
    lo = (lo // BLOCK_M) * BLOCK_M
    full_hi = tl.maximum((tl.minimum(kend_first, S) // BLOCK_M) * BLOCK_M, full_lo)

    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(GROUP):
        h = hkv * GROUP + g
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdob + h * sdoh
        lse_base = LSE + (b * H + h) * S
        delta_base = DELTA + (b * H + h) * S
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqs, sdos, offs_n, start_k,
                              end_k, lo, full_lo, S, qk_scale2, HEAD_DIM, BLOCK_M, True, CAUSAL, FP32_DOT,
                              MASKED_STAGES)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqs, sdos, offs_n, start_k,
                              end_k, full_lo, full_hi, S, qk_scale2, HEAD_DIM, BLOCK_M, False, CAUSAL, FP32_DOT, 0)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqs, sdos, offs_n, start_k,
                              end_k, full_hi, hi, S, qk_scale2, HEAD_DIM, BLOCK_M, True, CAUSAL, FP32_DOT,
                              MASKED_STAGES)

    dk = dk * sm_scale
    if ROPE:  # k was rotated in the forward: dk is stored for the keys before it
        dk = _rope_rows(dk, COS + b * scb, SIN + b * scb, offs_n, col_ok, scs, BLOCK_N, HEAD_DIM, True)
    tl.store(DK + b * sdkb + hkv * sdkh + offs_n[:, None] * sdks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + b * sdvb + hkv * sdvh + offs_n[:, None] * sdvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, start_q, end_q, lo, hi, S, qk_scale2,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
               FP32_DOT: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kt_ptrs = k_base + offs_n[None, :] * sks + offs_d[:, None]
        vt_ptrs = v_base + offs_n[None, :] * svs + offs_d[:, None]
        if MASKED:
            kt = tl.load(kt_ptrs, mask=offs_n[None, :] < S, other=0.0)
            vt = tl.load(vt_ptrs, mask=offs_n[None, :] < S, other=0.0)
        else:
            kt = tl.load(kt_ptrs)
            vt = tl.load(vt_ptrs)
        p = tl.exp2(_dot(q, kt, FP32_DOT) * qk_scale2 - lse[:, None])
        if MASKED:
            p = tl.where(_visible(offs_m[:, None], offs_n[None, :], start_q[:, None], end_q[:, None], CAUSAL), p, 0.0)
        dp = _dot(do, vt, FP32_DOT)
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(kt.dtype), tl.trans(kt), FP32_DOT)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    Q, K, V, O, DO, LSE, DELTA, DQ, DOC_START, DOC_END, COS, SIN,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, sdob, sdoh, sdos, sdqb, sdqh, sdqs, scb, scs,
    H, S, qk_scale2, sm_scale, short_span,
    GROUP, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_DOCS: tl.constexpr, SKIP: tl.constexpr, FP32_DOT: tl.constexpr,
    SUPER: tl.constexpr, TILES: tl.constexpr, ROPE: tl.constexpr, TILE_GROUP: tl.constexpr,
):
    """One query block: dq, and first delta = rowsum(o * do), the softmax-backward term of its rows, which it
    stores for the dk/dv pass that runs after it. Each row has one dq program, so this replaces a launch of its own
    that read o and do once more (~42 us per d768 layer on an H100, BENCHMARKS.md)."""
    block, pid_bh, blocks = _tile(TILE_GROUP)
    pid_m = blocks - 1 - block
    b = pid_bh // H
    h = pid_bh % H
    hkv = h // GROUP
    m0 = pid_m * BLOCK_M
    if TILES != 0:  # 1: this launch takes the long tiles, 2: the short ones
        if _short_tile(DOC_START, DOC_END, b * S, m0, S, short_span, SUPER, CAUSAL, False) == (TILES == 1):
            return
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < S
    last = tl.minimum(m0 + BLOCK_M, S) - 1

    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + offs_m[:, None] * sdos + offs_d[None, :], mask=row_ok[:, None],
                 other=0.0)
    lse = tl.load(LSE + pid_bh * S + offs_m, mask=row_ok, other=0.0)
    o = tl.load(O + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + pid_bh * S + offs_m, delta, mask=row_ok)
    start_q, end_q, start_first, start_last, end_first, end_last = _doc_bounds(
        DOC_START, DOC_END, b * S, offs_m, m0, last, S, HAS_DOCS)
    lo, mid_lo, tail_lo, hi = _key_phases(m0, last, start_first, start_last, end_first, end_last, S,
                                          BLOCK_N, CAUSAL, SKIP)

    k_base = K + b * skb + hkv * skh
    v_base = V + b * svb + hkv * svh
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    dq = _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, start_q, end_q, tail_lo, hi, S,
                    qk_scale2, HEAD_DIM, BLOCK_N, True, CAUSAL, FP32_DOT)
    dq = _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, start_q, end_q, mid_lo, tail_lo, S,
                    qk_scale2, HEAD_DIM, BLOCK_N, False, CAUSAL, FP32_DOT)
    dq = _dq_blocks(dq, q, do, lse, delta, k_base, v_base, sks, svs, offs_m, start_q, end_q, lo, mid_lo, S,
                    qk_scale2, HEAD_DIM, BLOCK_N, True, CAUSAL, FP32_DOT)
    dq = dq * sm_scale
    if ROPE:
        dq = _rope_rows(dq, COS + b * scb, SIN + b * scb, offs_m, row_ok, scs, BLOCK_M, HEAD_DIM, True)
    tl.store(DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


# ----------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------
# Launches after a kernel's first call with the same arguments skip Triton's per-call dispatch (kernels/launching.py).
_FWD, _DKDV, _DQ = map(Launcher, (_attn_fwd_kernel, _attn_bwd_dkdv_kernel, _attn_bwd_dq_kernel))


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """Block sizes and launch shape. dkdv_*: key block and query step of the dk/dv pass; dq_*: the dq pass.

    short_*: the blocks of the tiles whose document span is at most short_span positions (0: no short launch), in
    all three passes: short_block rows per program (queries, or keys in the dk/dv pass), short_step per loop step.
    short_block divides fwd_block_m, dkdv_block_n and dq_block_m, the big tiles a program classifies.
    fwd_tail_first: the forward walks its diagonal key blocks first (module docstring: Phase order), else in position
    order (the dq pass always walks the diagonal first).
    dkdv_masked_stages: pipeline stages of the dk/dv pass's masked loops (the diagonal, the documents' edges), a few
    steps per key block; 0: bwd_stages, as its unmasked loop. Built as the model launches it (Triton 3.6, sm_90,
    compile_check) the head-size-64 pass spills at neither (163 and 154 registers), and at 1 ran no faster at the
    d768 shape (H100, 2026-12-07, BENCHMARKS.md); at head size 128 it spills 72 B a thread pipelined alike and 16 B
    at 1, not yet timed.
    tma: the forward loads q, k and v through TMA tensor descriptors where the inputs allow it (_tma_layout), else
    through pointers. The backward's passes use pointers: TMA did not pay there (H100, 2026-12-06 fourth session,
    BENCHMARKS.md).
    tile_group: how many of the grid's (batch, head) rows launch their tiles interleaved, longest first (_tile): the
    largest divisor of a pass's rows up to this (_grid); 1: each row's tiles in turn."""

    fwd_block_m: int
    fwd_block_n: int
    fwd_warps: int
    fwd_stages: int
    dkdv_block_n: int
    dkdv_block_m: int
    dq_block_m: int
    dq_block_n: int
    bwd_warps: int
    bwd_stages: int
    dkdv_masked_stages: int = 0
    short_span: int = 0
    short_block: int = 0
    short_step: int = 0
    short_warps: int = 4
    short_stages: int = 2
    fwd_tail_first: bool = True
    tma: bool = True
    tile_group: int = 1

    def ints(self) -> list[int]:
        """The fields in order, as the ops take them (not dataclasses.astuple: torch.compile cannot trace its
        deepcopy inside an autograd.Function)."""
        return [int(getattr(self, name)) for name in _CONFIG_FIELDS]


_CONFIG_FIELDS = tuple(field.name for field in dataclasses.fields(AttentionConfig))


# The short-document tiles' settings per head size (64: sizes up to 64): spans up to two big tiles, in blocks that
# waste fewer masked pairs on documents of a few hundred positions and leave room for several programs per
# multiprocessor to hide each short loop's latency. Picked by that reasoning, then timed against the single launch
# in the same runs (`bench_kernels --parts flex`, BENCHMARKS.md). At head size 64 the single launch was faster at
# every row. At head size 128 the short tiles are faster on the GPU at 32 and 128 documents per row (as graphs, H200
# 0.68-0.69 vs 0.73 ms and 0.50 vs 0.64-0.65; H100 0.73 vs 0.76 and 0.56 vs 0.67) and 1-3.5% slower at 1 and 8
# documents, on 512-position documents and on the spm stream; launched from the host, as training launches them,
# their extra launches cost more than they save on the H100 of 2026-12-06 (0.99 vs 0.77 ms at 32 documents, 1.03
# vs 0.83 at 128). So the default is one launch per pass at both sizes; these stay an option (`with_short_tiles`,
# the flex part's `ours_other`).
SHORT_TILES = {64: dict(short_span=128, short_block=32, short_step=32),
               128: dict(short_span=256, short_block=64, short_step=32)}


def with_short_tiles(cfg: AttentionConfig, head_dim: int) -> AttentionConfig:
    """`cfg` with short-document tiles on: its own where it has them, else those of its head size (a config may ask
    for them at any size)."""
    return cfg if cfg.short_span else dataclasses.replace(cfg, **SHORT_TILES[64 if head_dim <= 64 else 128])


@functools.lru_cache(maxsize=64)  # on every call's host path; a config is frozen
def default_config(head_dim: int, device: torch.device) -> AttentionConfig:
    """Hopper (sm_90) configs picked by `tools/bench_kernels.py --parts sweep` on an H200 at the byte models'
    shapes (2026-12-03; BENCHMARKS.md); small blocks under the interpreter, where they exercise more block
    boundaries per test and cost little (numpy runs each block as one vectorised op)."""
    if device.type == "cpu":
        return AttentionConfig(32, 16, 4, 1, 32, 16, 32, 16, 4, 1, short_span=32, short_block=16, short_step=16,
                               short_stages=1)
    if head_dim <= 64:
        # The dk/dv pass steps 32 queries at a time: on 512-position documents 0.526 vs 0.555 ms fwd+bwd at the d768
        # shape, at one document a tie (H100 sweeps, 2026-12-05 and 2026-12-06). A forward of 128 queries and 8
        # warps runs 6% faster at one document but 7-9% slower at 8-128 documents (H100 A/B, 2026-12-06 third
        # session, BENCHMARKS.md): 64 queries stay. With TMA loads the forward runs faster at 2 stages than at 3
        # (1.07 / 1.19 / 1.17x against 1.04 / 1.12 / 1.07x the pointer forward at 1 / 8 / 512-position documents;
        # H100, 2026-12-06 fourth session); at head size 128, 2 stages lost.
        # Tiles launch 24 rows at a time, longest first (tile_group): fwd+bwd as graphs 1.018 / 1.032 / 1.020 /
        # 1.000x the grid's own order at one document / corpus-like documents / the spm stream / 512-position
        # documents, and fit-triton-compile on corpus-like documents +1.2% (H100, 2026-12-07, BENCHMARKS.md). All 96
        # rows of the d768 shape at once lost 3-11%. Launched as a (row in group, block, group) grid rather than
        # mapped from one linear id, fwd+bwd ran a further 1.025-1.034x and that training step +1.5% (H100,
        # 2026-12-07, nineteenth session).
        return AttentionConfig(64, 64, 4, 2, 64, 32, 64, 64, 4, 3, tile_group=24)
    # The forward walks key blocks in position order here: diagonal first, it ran 1-4% slower at every document
    # count on an H100 (fwd 0.689 vs 0.674 ms at one document, 0.298 vs 0.286 at 8; host-launched, 2026-12-06,
    # BENCHMARKS.md), where the backward gained. Tiles launch 16 rows at a time: fwd+bwd as graphs 1.051 / 1.056 /
    # 1.048 / 1.004x the grid's own order at one document / corpus-like / the spm stream / 512-position documents
    # at (4, 16, 4096, 128), against 1.050 / 1.054 / 1.052 / 0.992x at 8 rows and 1.029 / 1.048 / 1.039 / 0.982x at
    # 32 (H100, 2026-12-07, nineteenth session), though its dk/dv pass builds with 72 B of stack where the grid's
    # own order needs none (compile_check, as the model launches it).
    return AttentionConfig(128, 64, 8, 3, 128, 64, 128, 64, 8, 3, fwd_tail_first=False, tile_group=16)


def fwd_stages(stages: int, rope: bool, has_docs: bool, tma: bool) -> int:
    """The forward's pipeline stages for a launch: Triton 3.6's ptxas crashes (SIGSEGV) building the forward with
    RoPE and TMA loads but no documents at 2 stages (compile_check builds it), so that build takes 3."""
    return 3 if stages == 2 and rope and tma and not has_docs else stages


def _check_config(cfg: AttentionConfig) -> None:
    if cfg.tile_group < 1:
        raise KernelInputError(f"flash_attention: config.tile_group must be at least 1 (rows whose tiles launch "
                               f"interleaved), got {cfg.tile_group}")
    if cfg.dkdv_masked_stages < 0:
        raise KernelInputError(f"flash_attention: config.dkdv_masked_stages must be 0 (bwd_stages) or a number of "
                               f"stages, got {cfg.dkdv_masked_stages}")
    if cfg.short_span <= 0:
        return
    for name in ("fwd_block_m", "dkdv_block_n", "dq_block_m"):
        if cfg.short_block <= 0 or cfg.short_step <= 0 or getattr(cfg, name) % cfg.short_block:
            raise KernelInputError(f"flash_attention: config.short_block {cfg.short_block} (step {cfg.short_step}) "
                                   f"must be positive and divide {name} {getattr(cfg, name)}, the tile it splits")


def _launches(cfg: AttentionConfig, block: int, step: int, warps: int, stages: int, short: bool):
    """(rows per program, loop step, warps, stages, TILES) of each launch of one pass: every tile at once, or with
    `short` the long tiles in the pass's own blocks and the short ones in the short blocks (module docstring)."""
    if not short:
        return [(block, step, warps, stages, 0)]
    return [(block, step, warps, stages, 1), (cfg.short_block, cfg.short_step, cfg.short_warps, cfg.short_stages, 2)]


@functools.lru_cache(maxsize=256)  # on every launch's host path
def _grid(blocks: int, rows: int, tile_group: int) -> tuple[tuple[int, ...], int]:
    """A pass's launch grid and its group (_tile): the largest divisor of `rows` up to tile_group, so that every
    group is whole and no program needs the row count; (row in group, block, group), or (block, row) at 1."""
    group = max(g for g in range(1, min(tile_group, rows) + 1) if rows % g == 0)
    return ((blocks, rows) if group == 1 else (group, blocks, rows // group)), group


def document_bounds(doc_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) ids -> int32 (B, S) first position and one-past-last position of each position's run of equal ids."""
    batch, seq_len = doc_ids.shape
    pos = torch.arange(seq_len, device=doc_ids.device, dtype=torch.int32).expand(batch, seq_len)
    change = doc_ids[:, 1:] != doc_ids[:, :-1]
    edge = torch.ones(batch, 1, dtype=torch.bool, device=doc_ids.device)
    is_first = torch.cat([edge, change], dim=1)
    is_last = torch.cat([change, edge], dim=1)
    start = torch.where(is_first, pos, 0).cummax(dim=1).values
    end = torch.where(is_last, pos + 1, seq_len).flip(1).cummin(dim=1).values.flip(1)
    return start.to(torch.int32).contiguous(), end.to(torch.int32).contiguous()


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor | None,
                  doc_bounds: tuple[torch.Tensor, torch.Tensor] | None,
                  rope: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    op = "flash_attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_rank(op, name, t, 4, "(batch, heads, seq, head_dim)")
        if t.dtype not in SUPPORTED_DTYPES:
            raise KernelInputError(f"{op}: {name} has dtype {t.dtype}; use float16, bfloat16 or float32")
        if t.stride(-1) != 1:
            raise KernelInputError(f"{op}: {name} must have unit stride in head_dim (got strides {t.stride()}); "
                                   "pass a view of a tensor whose last dim is contiguous")
        if t.numel() >= 2**31:
            raise KernelInputError(f"{op}: {name} has {t.numel()} elements; at most 2**31 - 1 are supported")
    if not (q.dtype == k.dtype == v.dtype):
        raise KernelInputError(f"{op}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise KernelInputError(f"{op}: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    batch, heads, seq_len, head_dim = q.shape
    if k.shape[0] != batch or k.shape[2] != seq_len or k.shape[3] != head_dim:
        raise KernelInputError(f"{op}: k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)} in batch, seq "
                               "or head_dim")
    if heads % k.shape[1] != 0:
        raise KernelInputError(f"{op}: q has {heads} heads, not a multiple of k/v's {k.shape[1]} (GQA needs "
                               "kv heads dividing q heads)")
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise KernelInputError(f"{op}: head_dim {head_dim} is not supported; use one of {SUPPORTED_HEAD_DIMS}")
    if seq_len == 0 or batch == 0:
        raise KernelInputError(f"{op}: empty input of shape {tuple(q.shape)}")
    docs = {}
    if doc_ids is not None:
        if doc_bounds is not None:
            raise KernelInputError(f"{op}: pass doc_ids or doc_bounds, not both")
        if doc_ids.shape != (batch, seq_len):
            raise KernelInputError(f"{op}: doc_ids must have shape (batch, seq) = {(batch, seq_len)}, "
                                   f"got {tuple(doc_ids.shape)}")
        if doc_ids.dtype not in (torch.int32, torch.int64):
            raise KernelInputError(f"{op}: doc_ids must be int32 or int64, got {doc_ids.dtype}")
        docs["doc_ids"] = doc_ids
    elif doc_bounds is not None:
        docs = dict(zip(("doc_start", "doc_end"), doc_bounds))
        for name, t in docs.items():
            # The kernels index the bounds as flat (B, S) int32 rows, the layout document_bounds returns.
            if t.shape != (batch, seq_len) or t.dtype != torch.int32 or not t.is_contiguous():
                raise KernelInputError(f"{op}: doc_bounds' {name} must be a contiguous int32 tensor of shape (batch, "
                                       f"seq) = {(batch, seq_len)} as document_bounds returns, got {t.dtype} "
                                       f"{tuple(t.shape)} with strides {t.stride()}")
    if rope is not None:
        docs.update(zip(("cos", "sin"), rope))
        for name in ("cos", "sin"):
            t = docs[name]
            # The kernels read both at the same (batch, position) strides, unit stride across the half.
            if t.shape != (batch, seq_len, head_dim // 2) or t.dtype != torch.float32 or t.stride(-1) != 1 or (
                    t.stride() != docs["cos"].stride()):
                raise KernelInputError(f"{op}: rope's {name} must be float32 of shape (batch, seq, head_dim / 2) = "
                                       f"{(batch, seq_len, head_dim // 2)} with unit stride in its last dim, strides "
                                       f"equal to cos's, got {t.dtype} {tuple(t.shape)} with strides {t.stride()}")
    check_device(op, q=q, k=k, v=v, **docs)


def _tma_capable(device: torch.device) -> bool:
    """TMA needs Hopper or newer, and a triton with host tensor descriptors; the interpreter emulates them."""
    if TensorDescriptor is None:
        return False
    if interpreting():
        return True
    return device.type == "cuda" and _capability(device.index if device.index is not None else
                                                 torch.cuda.current_device()) >= 9


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def _tma_layout(t: torch.Tensor, blocks: tuple[int, ...]) -> bool:
    """Whether t (B, H, S, D) reads as one matrix of row stride t.stride(2) in which each (b, h) slice is S rows
    starting at one (row, column) with the slice's D columns inside a row (the kernels' _slice_at), and every
    block of rows ends at or before S. TMA's zero fill then never stands in for a mask: a block past S would read
    the next slice's rows."""
    batch, heads, seq_len, head_dim = t.shape
    sb, sh, ss, _ = t.stride()
    if any(seq_len % block for block in blocks) or ss < head_dim:
        return False
    if t.data_ptr() % 16 or (ss * t.element_size()) % 16:
        return False
    if batch > 1 and sb % ss:
        return False
    return heads == 1 or sh % ss == 0 or (heads - 1) * sh + head_dim <= ss


def _descriptor(t: torch.Tensor, block: int):
    """The TMA descriptor of t as _tma_layout reads it, in blocks of `block` rows."""
    batch, heads, seq_len, head_dim = t.shape
    sb, sh, ss, _ = t.stride()
    rows = ((batch - 1) * sb + (heads - 1) * sh) // ss + seq_len
    return TensorDescriptor(t, [rows, ss], [ss, 1], [block, head_dim])


def _descriptors(cfg: AttentionConfig, *tiles: tuple[torch.Tensor, int]) -> list:
    """A descriptor for each (tensor, block rows), or Nones where TMA is off or any of the tensors does not allow it
    (the kernels then load through pointers)."""
    blocks = tuple(rows for _, rows in tiles)
    if cfg.tma and _tma_capable(tiles[0][0].device) and all(_tma_layout(t, blocks) for t, _ in tiles):
        return [_descriptor(t, rows) for t, rows in tiles]
    return [None] * len(tiles)


def _fp32_dot(dtype: torch.dtype) -> bool:
    return interpreting() and dtype == torch.bfloat16


def _forward_outputs(q: torch.Tensor, rope: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """o stored (B, S, H, D) and seen as (B, H, S, D): the model's next op merges heads, a free view then; lse2; and
    with RoPE q rotated, laid out as q (else empty)."""
    batch, heads, seq_len, head_dim = q.shape
    o = q.new_empty(batch, seq_len, heads, head_dim).transpose(1, 2)
    q_rotated = torch.empty_like(q) if rope else q.new_empty(0)
    return o, q.new_empty(batch, heads, seq_len, dtype=torch.float32), q_rotated


def _launch_fwd(q, k, v, cos, sin, doc_start, doc_end, causal: bool, scale: float, skip: bool, cfg: AttentionConfig):
    """Launch the forward kernel on checked inputs; returns o, lse2 (B, H, S) float32 and q rotated (see
    _forward_outputs). With cos and sin, q is given before RoPE and k after."""
    batch, heads, seq_len, head_dim = q.shape
    rope = cos is not None
    o, lse, q_rotated = _forward_outputs(q, rope)
    has_docs = doc_start is not None
    short = has_docs and skip and cfg.short_span > 0
    angles = (cos, sin, q_rotated) if rope else (lse, lse, lse)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
               *(cos.stride()[:2] + q_rotated.stride()[:3] if rope else (0,) * 5))
    for block_m, block_n, warps, stages, tiles in _launches(cfg, cfg.fwd_block_m, cfg.fwd_block_n, cfg.fwd_warps,
                                                            cfg.fwd_stages, short):
        descs = _descriptors(cfg, (q, block_m), (k, block_n), (v, block_n))
        stages = fwd_stages(stages, rope, has_docs, descs[0] is not None)
        grid, group = _grid(cdiv(seq_len, block_m), batch * heads, cfg.tile_group)
        _FWD[grid](
            q, k, v, o, lse, doc_start if has_docs else lse, doc_end if has_docs else lse, *descs, *angles,
            *strides, heads, seq_len, scale * LOG2E, cfg.short_span,
            GROUP=heads // k.shape[1], HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
            CAUSAL=causal, HAS_DOCS=has_docs, SKIP=skip, FP32_DOT=_fp32_dot(q.dtype), SUPER=cfg.fwd_block_m,
            TILES=tiles, TAIL_FIRST=bool(cfg.fwd_tail_first), TMA=descs[0] is not None, ROPE=rope,
            TILE_GROUP=group, num_warps=warps, num_stages=stages,
        )
    return o, lse, q_rotated


def _launch_bwd(do, q, k, v, o, lse, cos, sin, doc_start, doc_end, causal: bool, scale: float, skip: bool,
                cfg: AttentionConfig):
    """dq, dk, dv (each laid out as its input) from the output gradient `do` and the forward's o and lse2. With cos
    and sin, q and k are the rotated ones the forward attended with, and dq and dk are those of the rows before."""
    batch, heads, seq_len, head_dim = q.shape
    kv_heads = k.shape[1]
    if do.stride(-1) != 1:
        do = do.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(lse)
    has_docs = doc_start is not None
    short = has_docs and skip and cfg.short_span > 0
    doc_start = doc_start if has_docs else lse
    doc_end = doc_end if has_docs else lse
    rope = cos is not None
    angles = (cos, sin) if rope else (lse, lse)
    angle_strides = cos.stride()[:2] if rope else (0, 0)
    common = dict(GROUP=heads // kv_heads, HEAD_DIM=head_dim, CAUSAL=causal, HAS_DOCS=has_docs, SKIP=skip,
                  FP32_DOT=_fp32_dot(q.dtype), ROPE=rope)
    do_strides = do.stride()[:3]
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    # dq first: its programs also write delta, which the dk/dv pass reads.
    for block_m, block_n, warps, stages, tiles in _launches(cfg, cfg.dq_block_m, cfg.dq_block_n, cfg.bwd_warps,
                                                            cfg.bwd_stages, short):
        grid, group = _grid(cdiv(seq_len, block_m), batch * heads, cfg.tile_group)
        _DQ[grid](
            q, k, v, o, do, lse, delta, dq, doc_start, doc_end, *angles, *strides, *o.stride()[:3], *do_strides,
            *dq.stride()[:3], *angle_strides, heads, seq_len, scale * LOG2E, scale, cfg.short_span, BLOCK_M=block_m,
            BLOCK_N=block_n, SUPER=cfg.dq_block_m, TILES=tiles, TILE_GROUP=group, num_warps=warps,
            num_stages=stages, **common,
        )
    for block_n, block_m, warps, stages, tiles in _launches(cfg, cfg.dkdv_block_n, cfg.dkdv_block_m, cfg.bwd_warps,
                                                            cfg.bwd_stages, short):
        grid, group = _grid(cdiv(seq_len, block_n), batch * kv_heads, cfg.tile_group)
        _DKDV[grid](
            q, k, v, do, lse, delta, dk, dv, doc_start, doc_end, *angles, *strides, *do_strides, *dk.stride()[:3],
            *dv.stride()[:3], *angle_strides, heads, seq_len, scale * LOG2E, scale, cfg.short_span, BLOCK_M=block_m,
            BLOCK_N=block_n, SUPER=cfg.dkdv_block_n, TILES=tiles, MASKED_STAGES=cfg.dkdv_masked_stages,
            TILE_GROUP=group, num_warps=warps, num_stages=stages, **common,
        )
    return dq, dk, dv


# The launchers as ops, for torch.compile (kernels/ops.py: why plain ops). AttentionConfig travels as its
# fields' ints.
flash_attn_fwd = define_op(
    "flash_attn_fwd",
    "(Tensor q, Tensor k, Tensor v, Tensor? cos, Tensor? sin, Tensor? doc_start, Tensor? doc_end, bool causal, "
    "float scale, bool skip, int[] config) -> (Tensor, Tensor, Tensor)",
    lambda q, k, v, cos, sin, doc_start, doc_end, causal, scale, skip, config: _launch_fwd(
        q, k, v, cos, sin, doc_start, doc_end, causal, scale, skip, AttentionConfig(*config)),
    lambda q, k, v, cos, *_: _forward_outputs(q, cos is not None))
flash_attn_bwd = define_op(
    "flash_attn_bwd",
    "(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor? cos, Tensor? sin, Tensor? doc_start, "
    "Tensor? doc_end, bool causal, float scale, bool skip, int[] config) -> (Tensor, Tensor, Tensor)",
    lambda do, q, k, v, o, lse, cos, sin, doc_start, doc_end, causal, scale, skip, config: _launch_bwd(
        do, q, k, v, o, lse, cos, sin, doc_start, doc_end, causal, scale, skip, AttentionConfig(*config)),
    lambda do, q, k, v, *_: (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)))


class _Attention(torch.autograd.Function):
    """The gradients of both paths. Traced by torch.compile, it calls the ops, which the graph records; run eagerly it
    calls the launchers themselves, since even a plain op's dispatch costs host time per call that buys nothing
    outside a graph."""

    @staticmethod
    def forward(ctx, q, k, v, cos, sin, doc_start, doc_end, causal, scale, skip, cfg):
        # With RoPE, k is rotated here (under torch.compile, by a kernel the compiler makes) and q by the forward
        # kernel, which loads each row once anyway; the backward's kernels return the gradients of the rows before.
        if cos is not None:
            k = _rotate(k, cos, sin)
        if torch.compiler.is_compiling():
            o, lse, q_rotated = flash_attn_fwd(q, k, v, cos, sin, doc_start, doc_end, causal, scale, skip, cfg.ints())
        else:
            o, lse, q_rotated = _launch_fwd(q, k, v, cos, sin, doc_start, doc_end, causal, scale, skip, cfg)
        if cos is not None:
            q = q_rotated
        ctx.save_for_backward(q, k, v, o, lse, cos, sin, doc_start, doc_end)
        ctx.options = (causal, scale, skip, cfg)
        return o

    @staticmethod
    def backward(ctx, do):
        saved = ctx.saved_tensors
        causal, scale, skip, cfg = ctx.options
        if torch.compiler.is_compiling():
            grads = flash_attn_bwd(do, *saved, causal, scale, skip, cfg.ints())
        else:
            grads = _launch_bwd(do, *saved, causal, scale, skip, cfg)
        return *grads, None, None, None, None, None, None, None, None


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (B, H, S, D) by angles (B, S, D/2), computed as the model's (B, S, H, D) rows so that a model's
    projection seen as (B, H, S, D) keeps its layout, and so do the gradients stored in the rotated rows' layout."""
    return apply_rope(x.transpose(1, 2), cos, sin).transpose(1, 2)


# ----------------------------------------------------------------------------------------------
# entry point
# ----------------------------------------------------------------------------------------------
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    doc_ids: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
    *,
    doc_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    skip_masked_blocks: bool = True,
    config: AttentionConfig | None = None,
    rope: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Softmax attention, differentiable in q, k, v.

    q: (B, H, S, D); k, v: (B, Hkv, S, D) with H % Hkv == 0; any strides with unit stride in D.
    doc_ids: optional (B, S) int32/int64; a query sees only keys of its own run of equal ids.
    doc_bounds: instead of doc_ids, `document_bounds(doc_ids)` made once by a caller that attends several times
    over the same documents (the model's layers).
    Returns (B, H, S, D) in q's dtype, stored as (B, S, H, D) so merging heads needs no copy.
    `skip_masked_blocks=False` still masks but computes every causal block (for benchmarking the skip).
    rope: (cos, sin), each (B, S, D/2) float32: q and k are given before RoPE (GPT-NeoX halves, `apply_rope`), are
    rotated here, and their gradients are those of the rows before, turned back inside the backward's kernels
    rather than by a separate pass over dq and dk.
    """
    _check_inputs(q, k, v, doc_ids, doc_bounds, rope)
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    if not scale > 0:  # the forward takes the row max before scaling, which needs a positive scale
        raise KernelInputError(f"flash_attention: softmax_scale must be positive, got {softmax_scale}")
    cfg = config or default_config(q.shape[-1], q.device)
    _check_config(cfg)
    if doc_ids is not None:
        doc_bounds = document_bounds(doc_ids)
    doc_start, doc_end = doc_bounds if doc_bounds is not None else (None, None)
    cos, sin = rope if rope is not None else (None, None)
    return _Attention.apply(q, k, v, cos, sin, doc_start, doc_end, bool(causal), scale, bool(skip_masked_blocks), cfg)
