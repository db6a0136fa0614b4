"""Embedding gather fused with the first block's RMSNorm, with a bandwidth-bound backward.

Forward: one kernel gathers each token's row and writes both the row (the residual stream) and its
RMSNorm (block 0's attention input). It also writes each id as the narrowest integer that holds the
vocabulary (int16 up to 32,768 rows), the key the backward sorts, and flags ids outside the table, so
the id range check costs no extra pass over the ids (a device-side assert on the GPU, as in torch).
A plain gather kernel without the norm was dropped: on the H200 it ran forward+backward at 0.57-0.62x
torch's speed, while the fused one runs at 1.32x the two torch ops it replaces.

Backward: dW[row] sums the output gradients of the tokens with that id. Global atomics would
serialize on hot rows (the space byte is a sizeable share of code) and make the sum order vary, so:
  1. `torch.sort` of the int16 keys (stable; two 8-bit radix passes) gives token positions by id.
  2. A segment-sum kernel: each program owns a fixed chunk of sorted positions and a block of columns,
     so every program moves the same bytes whatever the id skew. It gathers tiles of gradient rows
     and sums the runs of equal ids inside a tile with one small matmul by a 0/1 "same run, not
     later" matrix (tensor cores, fp32 sums); a carry links the tiles of a chunk. Each run that lies
     inside the chunk goes straight to its row. Only the first and last run of a chunk can cross into
     a neighbour; those go to two fp32 slots per chunk. Each row's first sorted position is recorded.
  3. A finishing kernel, again per chunk: the row that crosses the chunk's end and starts in it adds
     up its slots; the rows between this chunk's ids that no token uses are zeroed.
No host syncs, no data-dependent grid sizes, deterministic. Every gradient byte is read once; the
rest is the sort and two slot rows per chunk (1 MB at 65,536 tokens x 1024, L2-resident).

The normed output depends on the row only, so its backward is linear in the summed output gradient
of that row: kernels 2 and 3 sum both gradients (residual and normed) per row into fp32 buffers, and
a row kernel applies the RMSNorm backward once per row, not once per token.

A one-hot GEMM (dW = onehot(ids)^T @ grad, no sort) was weighed for the byte vocabulary and left
out: its 2*V*N*D FLOPs at V=260 (padded to 320 for 64-row MMA tiles) are 4.3e10 for 65,536 x 1024,
over 60 us even at the 701 TFLOP/s cuBLAS reaches on the H200, against ~31 us to read the gradient
once (4.3 TB/s) plus ~15 us of sort. It only wins below ~150 rows, which no vocabulary here has.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch_checks import KernelInputError, check_device, check_rank, interpreting
from .launching import Launcher, cdiv
from .ops import define_op

BLOCK_T = 32  # sorted tokens per segment-sum tile
TARGET_PROGRAMS = 1024  # segment-sum programs to aim for: ~8 per H200 SM, enough loads in flight
MAX_CHUNK = 1024  # sorted tokens per chunk at most; larger inputs get more programs instead
BLOCK_C = 16  # chunks whose slots the finishing kernel adds per step
BLOCK_R = 64  # rows the finishing kernel zeroes per step
INT16_KEY_ROWS = 2**15  # vocabularies up to this size sort int16 keys: half the radix passes of int32


def _chunk_size(tokens: int, column_blocks: int) -> int:
    """Sorted tokens per segment-sum program: about TARGET_PROGRAMS programs in all, whole tiles only."""
    want = cdiv(tokens * column_blocks, TARGET_PROGRAMS)
    return max(BLOCK_T, min(MAX_CHUNK, triton.next_power_of_2(want)))


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------
@triton.jit
def _both(flag, mask):
    """A scalar condition and a vector one; a select, since the interpreter makes bool scalar & vector int32."""
    return tl.where(flag, mask, False)


@triton.jit
def _embedding_rmsnorm_fwd_kernel(IDS, W, NORM_W, X, Y, KEYS, OK, N, D, V, stride_w, eps,
                                  BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    t_ok = offs_t < N
    ids = tl.load(IDS + offs_t, mask=t_ok, other=0)
    valid = t_ok & (ids >= 0) & (ids < V)
    tl.store(KEYS + offs_t, ids.to(KEYS.dtype.element_ty), mask=t_ok)
    # An id outside the table clears the flag the launcher checks (its row loads as zeros meanwhile).
    tl.store(OK + offs_t * 0, tl.zeros_like(offs_t).to(OK.dtype.element_ty), mask=t_ok & ~valid)
    ids = ids.to(tl.int64)
    rows = tl.load(W + ids[:, None] * stride_w + offs_d[None, :], mask=valid[:, None] & d_ok[None, :], other=0.0)
    g = tl.load(NORM_W + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    xf = rows.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 1) / D + eps)
    out_offs = offs_t[:, None] * D + offs_d[None, :]
    ok = t_ok[:, None] & d_ok[None, :]
    tl.store(X + out_offs, rows, mask=ok)
    tl.store(Y + out_offs, (xf * rstd[:, None] * g[None, :]).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _run_sums(G, ptrs, ok, same_run, head_run, carry, PRECISION: tl.constexpr):
    """Row t: the sum of its run's tokens in the tile up to t, plus `carry` in the tile's first run.

    One small matmul with a 0/1 matrix, fp32 sums on the tensor cores. PRECISION (see _dot_precision):
    "native" for 16-bit grads (exact products); for fp32 grads "tf32x3" (the 0/1 factor is exact in tf32 and
    each gradient keeps ~22 of its 24 bits, split in two tf32 parts) or "ieee" (exact, on the FMA units).
    """
    g = tl.load(G + ptrs, mask=ok, other=0.0)
    if PRECISION == "native":
        sums = tl.dot(same_run.to(g.dtype), g)
    else:
        sums = tl.dot(same_run.to(tl.float32), g.to(tl.float32), input_precision=PRECISION)
    return tl.where(head_run, sums + carry[None, :], sums)


@triton.jit
def _store_runs(OUT, SLOTS, sums, dst, slot, inside, border, any_border):
    """Runs ending here: inside the chunk to their row of OUT, crossing its border to the chunk's slot."""
    tl.store(OUT + dst, sums.to(OUT.dtype.element_ty), mask=inside)
    if any_border:  # at most two per chunk: the branch keeps the slot addresses out of most tiles' registers
        tl.store(SLOTS + slot, sums, mask=border)


@triton.jit
def _chunk_bounds(KEYS, chunk, N, CHUNK: tl.constexpr):
    """A chunk's sorted-token range [c0, c1), its last key, and the keys just before and after it (-1: none)."""
    c0 = chunk * CHUNK
    c1 = tl.minimum(c0 + CHUNK, N)
    last_row = tl.load(KEYS + c1 - 1).to(tl.int32)
    # Neighbours through clamped scalar loads (the interpreter rejects scalar masks).
    before = tl.where(c0 > 0, tl.load(KEYS + tl.maximum(c0 - 1, 0)).to(tl.int32), -1)
    after = tl.where(c1 < N, tl.load(KEYS + tl.minimum(c1, N - 1)).to(tl.int32), -1)
    return c0, c1, last_row, before, after


@triton.jit
def _segment_sums_kernel(GRAD_X, GRAD_Y, KEYS, PERM, OUT_X, OUT_Y, SLOTS_X, SLOTS_Y, ROW_START, N, D,
                         CHUNK: tl.constexpr, PRECISION: tl.constexpr, BLOCK_T: tl.constexpr,
                         BLOCK_D: tl.constexpr):
    """Sum the runs of equal keys in one chunk of sorted tokens, for both gradients (module docstring, step 2)."""
    chunk = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    c0, c1, last_row, before, after = _chunk_bounds(KEYS, chunk, N, CHUNK)
    first_row = tl.load(KEYS + c0).to(tl.int32)
    from_before = before == first_row
    into_next = after == last_row
    carry_x = tl.zeros([BLOCK_D], dtype=tl.float32)
    carry_y = tl.zeros([BLOCK_D], dtype=tl.float32)
    for t0 in range(c0, c1, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        t_ok = offs_t < c1
        rows = tl.load(KEYS + offs_t, mask=t_ok, other=-1).to(tl.int32)
        prev = tl.load(KEYS + offs_t - 1, mask=t_ok & (offs_t > c0), other=-1).to(tl.int32)
        nxt = tl.load(KEYS + offs_t + 1, mask=offs_t + 1 < c1, other=-1).to(tl.int32)
        starts = rows != prev  # true at the chunk's first token: runs are cut at chunk borders
        ends = t_ok & (rows != nxt)
        src = tl.load(PERM + offs_t, mask=t_ok, other=0).to(tl.int64)
        ptrs = src[:, None] * D + offs_d[None, :]
        ok = t_ok[:, None] & d_ok[None, :]
        run = tl.cumsum(starts.to(tl.int32), 0)
        same_run = (run[:, None] == run[None, :]) & (offs_t[None, :] <= offs_t[:, None])
        head_run = (run == tl.min(run, 0))[:, None]  # goes on with the open run of the previous tile
        tail_open = ((offs_t == t0 + BLOCK_T - 1) & ~ends)[:, None]
        sum_x = _run_sums(GRAD_X, ptrs, ok, same_run, head_run, carry_x, PRECISION)
        carry_x = tl.sum(tl.where(tail_open, sum_x, 0.0), 0)
        sum_y = _run_sums(GRAD_Y, ptrs, ok, same_run, head_run, carry_y, PRECISION)
        carry_y = tl.sum(tl.where(tail_open, sum_y, 0.0), 0)
        first_run = _both(from_before, rows == first_row)
        border = ends & (first_run | _both(into_next, rows == last_row))
        inside = ok & (ends & ~border)[:, None]
        any_border = tl.sum(border.to(tl.int32), 0) > 0
        dst = rows.to(tl.int64)[:, None] * D + offs_d[None, :]
        # Slot 0 holds the run that began in an earlier chunk, slot 1 the one that goes on into the next.
        slot = (chunk * 2 + tl.where(first_run, 0, 1)).to(tl.int64)[:, None] * D + offs_d[None, :]
        _store_runs(OUT_X, SLOTS_X, sum_x, dst, slot, inside, ok & border[:, None], any_border)
        _store_runs(OUT_Y, SLOTS_Y, sum_y, dst, slot, inside, ok & border[:, None], any_border)
        row_starts = t_ok & starts & ~_both(from_before, offs_t == c0)
        tl.store(ROW_START + rows, offs_t, mask=_both(tl.program_id(1) == 0, row_starts))


@triton.jit
def _finish_rows_kernel(KEYS, ROW_START, SLOTS, OUT, N, V, D, n_chunks, CHUNK: tl.constexpr,
                        BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """Per chunk: write the row that crosses its end and starts in it, and zero the unused rows it owns."""
    chunk = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    _, _, last_row, before, after = _chunk_bounds(KEYS, chunk, N, CHUNK)
    owns = (after == last_row) & (before != last_row)
    acc = tl.load(SLOTS + (chunk * 2 + 1).to(tl.int64) * D + offs_d, mask=_both(owns, d_ok), other=0.0)
    c = chunk + 1
    more = owns
    while more:  # later chunks that begin with this row: their slot 0
        offs_c = c + tl.arange(0, BLOCK_C)
        heads = tl.load(KEYS + tl.minimum(offs_c * CHUNK, N - 1)).to(tl.int32)
        in_row = (offs_c < n_chunks) & (heads == last_row)
        ptrs = (offs_c * 2).to(tl.int64)[:, None] * D + offs_d[None, :]
        acc += tl.sum(tl.load(SLOTS + ptrs, mask=in_row[:, None] & d_ok[None, :], other=0.0), 0)
        more = tl.sum(in_row.to(tl.int32), 0) == BLOCK_C
        c += BLOCK_C
    tl.store(OUT + last_row.to(tl.int64) * D + offs_d, acc.to(OUT.dtype.element_ty), mask=_both(owns, d_ok))
    # Rows after the previous chunk's last id and before this chunk's last one (all rows up to V for the
    # final chunk) are either used in this chunk or by no token. ROW_START holds a used row's first
    # sorted position; other entries are never written, so they are only trusted where KEYS confirms.
    hi = tl.where(chunk == n_chunks - 1, V, last_row)
    for r0 in range(before + 1, hi, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        r_ok = rows < hi
        start = tl.load(ROW_START + rows, mask=r_ok, other=-1)
        seen = r_ok & (start >= 0) & (start < N)
        used = seen & (tl.load(KEYS + start, mask=seen, other=-1).to(tl.int32) == rows)
        zeros = tl.zeros([BLOCK_R, BLOCK_D], dtype=OUT.dtype.element_ty)
        tl.store(OUT + rows.to(tl.int64)[:, None] * D + offs_d[None, :], zeros,
                 mask=(r_ok & ~used)[:, None] & d_ok[None, :])


@triton.jit
def _rmsnorm_rows_bwd_kernel(SUM_X, SUM_Y, W, NORM_W, DW, DG_PART, V, D, stride_w, eps,
                             BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """RMSNorm backward once per row from its summed gradients; one partial dnorm_weight per program."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    g = tl.load(NORM_W + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    dg = tl.zeros([BLOCK_D], dtype=tl.float32)
    for r0 in range(tl.program_id(0) * BLOCK_R, V, tl.num_programs(0) * BLOCK_R):
        rows = (r0 + tl.arange(0, BLOCK_R)).to(tl.int64)
        ok = (rows < V)[:, None] & d_ok[None, :]
        offs = rows[:, None] * D + offs_d[None, :]
        sum_x = tl.load(SUM_X + offs, mask=ok, other=0.0)
        sum_y = tl.load(SUM_Y + offs, mask=ok, other=0.0)
        w = tl.load(W + rows[:, None] * stride_w + offs_d[None, :], mask=ok, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(w * w, 1) / D + eps)
        gy = g[None, :] * sum_y
        proj = rstd * rstd * rstd / D * tl.sum(gy * w, 1)
        dw = sum_x + rstd[:, None] * gy - w * proj[:, None]
        tl.store(DW + offs, dw.to(DW.dtype.element_ty), mask=ok)
        dg += tl.sum(sum_y * w * rstd[:, None], 0)
    tl.store(DG_PART + tl.program_id(0) * D + offs_d, dg, mask=d_ok)


# ----------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------
OP = "embedding_rmsnorm"
# Launches after a kernel's first call with the same arguments skip Triton's per-call dispatch (kernels/launching.py).
_FWD, _SEGMENT_SUMS, _FINISH_ROWS, _ROWS_BWD = map(Launcher, (_embedding_rmsnorm_fwd_kernel, _segment_sums_kernel,
                                                              _finish_rows_kernel, _rmsnorm_rows_bwd_kernel))


def _check_inputs(ids: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor) -> None:
    check_rank(OP, "weight", weight, 2, "(vocab, dim)")
    if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise KernelInputError(f"{OP}: weight has dtype {weight.dtype}; use float16, bfloat16 or float32")
    if weight.stride(1) != 1:
        raise KernelInputError(f"{OP}: weight must have unit stride in dim (got strides {weight.stride()})")
    if ids.dtype not in (torch.int32, torch.int64):
        raise KernelInputError(f"{OP}: ids must be int32 or int64, got {ids.dtype}")
    check_rank(OP, "norm_weight", norm_weight, 1, "(dim,)")
    if norm_weight.shape[0] != weight.shape[1]:
        raise KernelInputError(f"{OP}: norm_weight has {norm_weight.shape[0]} entries, weight rows have "
                               f"{weight.shape[1]}")
    if norm_weight.stride(0) != 1:
        raise KernelInputError(f"{OP}: norm_weight must have unit stride (got {norm_weight.stride(0)})")
    check_device(OP, ids=ids, weight=weight, norm_weight=norm_weight)
    if ids.numel() == 0:
        raise KernelInputError(f"{OP}: ids is empty")
    if weight.shape[0] == 0:
        raise KernelInputError(f"{OP}: weight has no rows")


def _raise_on_bad_ids(flat: torch.Tensor, vocab: int, ok: torch.Tensor) -> None:
    message = f"{OP}: ids must lie in [0, {vocab}) for a table of {vocab} rows"
    if flat.device.type == "cuda":
        # A device-side assert, as in torch's own embedding: a host sync per call would stall the queue.
        torch._assert_async(ok, message)
    elif not ok.item():
        low, high = torch.aminmax(flat)
        raise KernelInputError(f"{message}, got range [{int(low)}, {int(high)}]")


def _dot_precision(dtype: torch.dtype) -> str:
    """The segment sums' matmul precision. Under the interpreter "ieee" for every dtype (its bf16 dots are wrong in
    triton 3.9). fp32 gradients are what a model trained in bf16-mixed gives (its weights stay fp32): "ieee" there
    ran the matmul on the FMA units and made the backward the slowest kernel of the embedding (BENCHMARKS.md,
    Kernels, 2026-12-04); "tf32x3" keeps the tensor cores."""
    if interpreting():
        return "ieee"
    return "tf32x3" if dtype == torch.float32 else "native"


def _sum_rows(keys: torch.Tensor, grad_x: torch.Tensor, grad_y: torch.Tensor, sums: torch.Tensor) -> None:
    """sums[0][row], sums[1][row]: grad_x and grad_y (N, D) summed over the tokens whose key is `row` (0 if none)."""
    n = keys.numel()
    _, vocab, dim = sums.shape
    sorted_keys, perm = torch.sort(keys, stable=True)  # stable: each row sums its tokens in order
    block_d = max(16, min(triton.next_power_of_2(dim), 128))  # tl.dot takes 16 columns at least
    column_blocks = cdiv(dim, block_d)
    chunk = _chunk_size(n, column_blocks)
    chunks = cdiv(n, chunk)
    slots = torch.empty(2, 2 * chunks, dim, device=keys.device, dtype=torch.float32)
    row_start = torch.empty(vocab, device=keys.device, dtype=torch.int32)  # see _finish_rows_kernel
    grid = (chunks, column_blocks)
    _SEGMENT_SUMS[grid](grad_x, grad_y, sorted_keys, perm, sums[0], sums[1], slots[0], slots[1], row_start, n, dim,
                        CHUNK=chunk, PRECISION=_dot_precision(grad_x.dtype), BLOCK_T=BLOCK_T, BLOCK_D=block_d,
                        num_warps=4)
    for slot, out in zip(slots, sums):
        _FINISH_ROWS[grid](sorted_keys, row_start, slot, out, n, vocab, dim, chunks, CHUNK=chunk,
                           BLOCK_C=BLOCK_C, BLOCK_R=BLOCK_R, BLOCK_D=block_d, num_warps=4)


def _forward_outputs(ids: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x and y (..., d) in weight's dtype; the flat sort keys, as narrow an int as the vocabulary allows."""
    vocab, dim = weight.shape
    x = weight.new_empty(*ids.shape, dim)
    key_dtype = torch.int16 if vocab <= INT16_KEY_ROWS else torch.int32
    return x, torch.empty_like(x), ids.new_empty(ids.numel(), dtype=key_dtype)


def _launch_fwd(ids, weight, norm_weight, eps):
    """Launch the forward kernel on checked inputs: weight[ids], its RMSNorm times norm_weight, and the sort keys."""
    flat = ids.reshape(-1)
    n = flat.numel()
    vocab, dim = weight.shape
    x, y, keys = _forward_outputs(ids, weight)
    ok = torch.ones(1, device=weight.device, dtype=torch.int32)
    block_d = triton.next_power_of_2(dim)
    block_t = max(1, min(16, 8192 // block_d))
    _FWD[(cdiv(n, block_t),)](
        flat, weight, norm_weight, x, y, keys, ok, n, dim, vocab, weight.stride(0), eps, BLOCK_T=block_t,
        BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4)
    _raise_on_bad_ids(flat, vocab, ok)
    return x, y, keys


def _launch_bwd(keys, grad_x, grad_y, weight, norm_weight, eps):
    """dweight and dnorm_weight from the gradients of both forward outputs and the forward's sort keys."""
    vocab, dim = weight.shape
    sums = torch.empty(2, vocab, dim, device=weight.device, dtype=torch.float32)
    _sum_rows(keys, grad_x.reshape(-1, dim).contiguous(), grad_y.reshape(-1, dim).contiguous(), sums)
    dw = torch.empty_like(weight)
    block_d = triton.next_power_of_2(dim)
    block_r = max(1, min(8, 4096 // block_d))
    programs = min(cdiv(vocab, block_r), 512)  # bounds the partial dnorm_weight rows to add up
    dg_part = torch.empty(programs, dim, device=weight.device, dtype=torch.float32)
    _ROWS_BWD[(programs,)](sums[0], sums[1], weight, norm_weight, dw, dg_part, vocab, dim, weight.stride(0), eps,
                           BLOCK_R=block_r, BLOCK_D=block_d, num_warps=8 if block_d >= 2048 else 4)
    return dw, dg_part.sum(0).to(norm_weight.dtype)


# The launchers as ops, for torch.compile (kernels/ops.py: why plain ops).
embedding_rmsnorm_fwd = define_op(
    "embedding_rmsnorm_fwd", "(Tensor ids, Tensor weight, Tensor norm_weight, float eps) -> (Tensor, Tensor, Tensor)",
    _launch_fwd, lambda ids, weight, *_: _forward_outputs(ids, weight))
embedding_rmsnorm_bwd = define_op(
    "embedding_rmsnorm_bwd",
    "(Tensor keys, Tensor grad_x, Tensor grad_y, Tensor weight, Tensor norm_weight, float eps) -> (Tensor, Tensor)",
    _launch_bwd, lambda keys, grad_x, grad_y, weight, norm_weight, eps: (torch.empty_like(weight),
                                                                          torch.empty_like(norm_weight)))


class _EmbeddingRMSNorm(torch.autograd.Function):
    """The gradients of both paths: traced by torch.compile it calls the ops, run eagerly the launchers themselves
    (as the attention's autograd.Function). An output that took no part in the loss brings a zero gradient."""

    @staticmethod
    def forward(ctx, ids, weight, norm_weight, eps):
        launch = embedding_rmsnorm_fwd if torch.compiler.is_compiling() else _launch_fwd
        x, y, keys = launch(ids, weight, norm_weight, eps)
        ctx.save_for_backward(keys, weight, norm_weight)
        ctx.eps = eps
        return x, y

    @staticmethod
    def backward(ctx, grad_x, grad_y):
        keys, weight, norm_weight = ctx.saved_tensors
        launch = embedding_rmsnorm_bwd if torch.compiler.is_compiling() else _launch_bwd
        dw, dg = launch(keys, grad_x, grad_y, weight, norm_weight, ctx.eps)
        return None, dw, dg, None


# ----------------------------------------------------------------------------------------------
# entry point
# ----------------------------------------------------------------------------------------------
def embedding_rmsnorm(
    ids: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight[ids], RMSNorm(weight[ids]) * norm_weight), both (..., d) in weight's dtype.

    ids: any shape, int32/int64, not empty; weight (V, d) with unit stride in d; norm_weight (d,).
    Differentiable in weight and norm_weight; the first is the residual stream, the second the first
    block's input.
    """
    _check_inputs(ids, weight, norm_weight)
    return _EmbeddingRMSNorm.apply(ids, weight, norm_weight, float(eps))
