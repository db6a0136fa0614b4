"""Embedding gather for a small vocabulary, optionally fused with the first RMSNorm.

The forward is a gather. The backward must sum the output gradients of every token that used a row;
with a few hundred rows, global atomics would serialize on the hot rows (the space byte alone is a
sizeable share of code). Instead token positions are sorted by id (stable, so the result is
deterministic) and the sorted array is cut into fixed chunks of at most `MAX_CHUNK` tokens. Pass 1 walks each
chunk run by run (a run = the chunk's tokens of one row), sums each run in registers and writes a run
that lies wholly inside the chunk straight to its row; only the first and last run of a chunk can
cross into a neighbour, and those go to two per-chunk slots. Pass 2 adds up the slots of each row that
crosses chunks and zero-fills unused rows. No atomics, no host sync, four launches (sort,
searchsorted, two kernels): at these sizes launch overhead matters as much as bandwidth.

Fusing RMSNorm: the normed output depends on the row only, so its backward is linear in the summed
output gradient of that row. Pass 1 sums both gradients per row and pass 2 applies the RMSNorm
backward once per row, not once per token.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch_checks import KernelInputError, check_device, check_rank

MAX_CHUNK = 256  # sorted tokens per pass-1 program at most: bounds the longest program whatever the id skew


def _chunk_size(tokens: int, vocab: int) -> int:
    """About four rows' worth of tokens per chunk: a chunk walks its runs one after another, so with many
    rare rows (an SPM range) small chunks keep that walk short and the grid wide."""
    return max(16, min(MAX_CHUNK, triton.next_power_of_2(max(1, 4 * tokens // vocab))))


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------
@triton.jit
def _embedding_fwd_kernel(IDS, W, OUT, N, D, stride_w, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = (offs_t[:, None] < N) & (offs_d[None, :] < D)
    ids = tl.load(IDS + offs_t, mask=offs_t < N, other=0).to(tl.int64)
    rows = tl.load(W + ids[:, None] * stride_w + offs_d[None, :], mask=ok)
    tl.store(OUT + offs_t[:, None] * D + offs_d[None, :], rows, mask=ok)


@triton.jit
def _embedding_rmsnorm_fwd_kernel(IDS, W, NORM_W, X, Y, N, D, stride_w, eps,
                                  BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    ok = (offs_t[:, None] < N) & d_ok[None, :]
    ids = tl.load(IDS + offs_t, mask=offs_t < N, other=0).to(tl.int64)
    rows = tl.load(W + ids[:, None] * stride_w + offs_d[None, :], mask=ok, other=0.0)
    g = tl.load(NORM_W + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    xf = rows.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, 1) / D + eps)
    out_offs = offs_t[:, None] * D + offs_d[None, :]
    tl.store(X + out_offs, rows, mask=ok)
    tl.store(Y + out_offs, (xf * rstd[:, None] * g[None, :]).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _embedding_bwd_chunks_kernel(GRAD_X, GRAD_Y, SORTED_IDS, PERM, ROW_BOUNDS, SLOTS_X, SLOTS_Y, OUT_X, OUT_Y, N, D,
                                 CHUNK: tl.constexpr, TWO_GRADS: tl.constexpr, BLOCK_T: tl.constexpr,
                                 BLOCK_D: tl.constexpr):
    """Pass 1: sum each run of one chunk of sorted tokens; inside runs go to OUT[row], border runs to slots."""
    chunk = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    # int64 throughout: the row bounds (from searchsorted) are int64 and `pos` is carried across the loop.
    c0 = chunk.to(tl.int64) * CHUNK
    c1 = tl.minimum(c0 + CHUNK, N)
    pos = c0
    while pos < c1:
        row = tl.load(SORTED_IDS + pos).to(tl.int64)
        r0 = tl.load(ROW_BOUNDS + row)
        r1 = tl.load(ROW_BOUNDS + row + 1)
        end = tl.minimum(r1, c1)
        acc_x = tl.zeros([BLOCK_D], dtype=tl.float32)
        acc_y = tl.zeros([BLOCK_D], dtype=tl.float32)
        for t in range(pos, end, BLOCK_T):
            offs_t = t + tl.arange(0, BLOCK_T)
            t_ok = offs_t < end
            src = tl.load(PERM + offs_t, mask=t_ok, other=0)
            ptrs = src[:, None] * D + offs_d[None, :]
            ok = t_ok[:, None] & d_ok[None, :]
            acc_x += tl.sum(tl.load(GRAD_X + ptrs, mask=ok, other=0.0).to(tl.float32), 0)
            if TWO_GRADS:
                acc_y += tl.sum(tl.load(GRAD_Y + ptrs, mask=ok, other=0.0).to(tl.float32), 0)
        # Masks are broadcast to vectors first: the interpreter rejects scalar masks.
        inside = (offs_d * 0 + ((r0 >= c0) & (r1 <= c1)).to(tl.int32)) != 0
        slot = (chunk * 2 + (r0 >= c0).to(tl.int32)).to(tl.int64) * D + offs_d  # 0: first run, 1: last run
        tl.store(OUT_X + row * D + offs_d, acc_x.to(OUT_X.dtype.element_ty), mask=d_ok & inside)
        tl.store(SLOTS_X + slot, acc_x, mask=d_ok & ~inside)
        if TWO_GRADS:
            tl.store(OUT_Y + row * D + offs_d, acc_y, mask=d_ok & inside)
            tl.store(SLOTS_Y + slot, acc_y, mask=d_ok & ~inside)
        pos = end


@triton.jit
def _row_border_sum(SLOTS, r0, r1, offs_d, d_ok, D, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr):
    """Sum of the slots holding a row that crosses chunks (zero for rows that do not)."""
    first = r0 // CHUNK
    last = tl.maximum(r1 - 1, r0) // CHUNK
    stop = tl.where(last > first, last + 1, first)  # empty loop unless the row crosses a chunk border
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for c in range(first, stop):
        # In its first chunk the row is that chunk's last run (slot 1); later, the first run (slot 0).
        slot = c * 2 + (c == first).to(tl.int32)
        acc += tl.load(SLOTS + slot.to(tl.int64) * D + offs_d, mask=d_ok, other=0.0)
    return acc, last > first


@triton.jit
def _embedding_bwd_rows_kernel(SLOTS_X, ROW_BOUNDS, DW, D, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr):
    """Pass 2: finish rows that cross chunks and zero-fill unused rows; pass 1 wrote all others."""
    row = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    r0 = tl.load(ROW_BOUNDS + row)
    r1 = tl.load(ROW_BOUNDS + row + 1)
    acc, crosses = _row_border_sum(SLOTS_X, r0, r1, offs_d, d_ok, D, CHUNK, BLOCK_D)
    mine = (offs_d * 0 + (crosses | (r1 == r0)).to(tl.int32)) != 0
    tl.store(DW + row * D + offs_d, acc.to(DW.dtype.element_ty), mask=d_ok & mine)


@triton.jit
def _embedding_rmsnorm_bwd_rows_kernel(SLOTS_X, SLOTS_Y, SUM_X, SUM_Y, ROW_BOUNDS, W, NORM_W, DW, DG_ROWS, D,
                                       stride_w, eps, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr):
    """Pass 2 with the RMSNorm backward applied once to each row's summed gradient of the normed output."""
    row = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    r0 = tl.load(ROW_BOUNDS + row)
    r1 = tl.load(ROW_BOUNDS + row + 1)
    border_x, crosses = _row_border_sum(SLOTS_X, r0, r1, offs_d, d_ok, D, CHUNK, BLOCK_D)
    border_y, crosses = _row_border_sum(SLOTS_Y, r0, r1, offs_d, d_ok, D, CHUNK, BLOCK_D)
    inside = (offs_d * 0 + ((r1 > r0) & ~crosses).to(tl.int32)) != 0  # pass 1 wrote SUM_*[row]
    sum_x = border_x + tl.load(SUM_X + row * D + offs_d, mask=d_ok & inside, other=0.0)
    sum_y = border_y + tl.load(SUM_Y + row * D + offs_d, mask=d_ok & inside, other=0.0)
    w = tl.load(W + row * stride_w + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    g = tl.load(NORM_W + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(w * w, 0) / D + eps)
    gy = g * sum_y
    dw = sum_x + rstd * gy - w * (rstd * rstd * rstd / D) * tl.sum(gy * w, 0)
    tl.store(DW + row * D + offs_d, dw.to(DW.dtype.element_ty), mask=d_ok)
    tl.store(DG_ROWS + row * D + offs_d, sum_y * w * rstd, mask=d_ok)


# ----------------------------------------------------------------------------------------------
# launchers
# ----------------------------------------------------------------------------------------------
def _check_inputs(op: str, ids: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor | None = None) -> None:
    check_rank(op, "weight", weight, 2, "(vocab, dim)")
    if weight.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise KernelInputError(f"{op}: weight has dtype {weight.dtype}; use float16, bfloat16 or float32")
    if weight.stride(1) != 1:
        raise KernelInputError(f"{op}: weight must have unit stride in dim (got strides {weight.stride()})")
    if ids.dtype not in (torch.int32, torch.int64):
        raise KernelInputError(f"{op}: ids must be int32 or int64, got {ids.dtype}")
    if norm_weight is not None:
        check_rank(op, "norm_weight", norm_weight, 1, "(dim,)")
        if norm_weight.shape[0] != weight.shape[1]:
            raise KernelInputError(f"{op}: norm_weight has {norm_weight.shape[0]} entries, weight rows have "
                                   f"{weight.shape[1]}")
        check_device(op, ids=ids, weight=weight, norm_weight=norm_weight)
    else:
        check_device(op, ids=ids, weight=weight)
    if ids.numel() and weight.shape[0] == 0:
        raise KernelInputError(f"{op}: weight has no rows")
    if ids.numel():
        # An out-of-range id would read outside the table. On the GPU the check is a device-side assert,
        # as in torch's own embedding: a host sync per call would stall the launch queue.
        message = f"{op}: ids must lie in [0, {weight.shape[0]}) for a table of {weight.shape[0]} rows"
        low, high = torch.aminmax(ids)
        if ids.device.type == "cuda":
            torch._assert_async((low >= 0) & (high < weight.shape[0]), message)
        elif int(low) < 0 or int(high) >= weight.shape[0]:
            raise KernelInputError(f"{message}, got range [{int(low)}, {int(high)}]")


def _sorted_tokens(flat_ids: torch.Tensor, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids sorted (stable), the token positions in that order, and each row's [start, end) in it."""
    sorted_ids, perm = torch.sort(flat_ids, stable=True)
    bounds = torch.searchsorted(sorted_ids, torch.arange(vocab + 1, device=flat_ids.device, dtype=flat_ids.dtype))
    return sorted_ids, perm, bounds


def _row_block(dim: int) -> int:
    return min(triton.next_power_of_2(dim), 256)


def embedding_forward(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    flat = ids.reshape(-1)
    n, dim = flat.numel(), weight.shape[1]
    out = torch.empty(n, dim, device=weight.device, dtype=weight.dtype)
    block_t, block_d = 16, min(triton.next_power_of_2(dim), 1024)
    _embedding_fwd_kernel[(triton.cdiv(n, block_t), triton.cdiv(dim, block_d))](
        flat, weight, out, n, dim, weight.stride(0), BLOCK_T=block_t, BLOCK_D=block_d, num_warps=4)
    return out.view(*ids.shape, dim)


def embedding_backward(ids: torch.Tensor, grad_out: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    flat = ids.reshape(-1)
    n = flat.numel()
    vocab, dim = weight.shape
    grad = grad_out.reshape(-1, dim).contiguous()
    dw = torch.empty(vocab, dim, device=weight.device, dtype=weight.dtype)
    sorted_ids, perm, bounds = _sorted_tokens(flat, vocab)
    chunk = _chunk_size(n, vocab)
    chunks = triton.cdiv(n, chunk)
    slots = torch.empty(2 * chunks, dim, device=weight.device, dtype=torch.float32)
    block_d = _row_block(dim)
    if chunks:
        _embedding_bwd_chunks_kernel[(chunks, triton.cdiv(dim, block_d))](
            grad, grad, sorted_ids, perm, bounds, slots, slots, dw, dw, n, dim,
            CHUNK=chunk, TWO_GRADS=False, BLOCK_T=min(32, chunk), BLOCK_D=block_d, num_warps=4)
    _embedding_bwd_rows_kernel[(vocab, triton.cdiv(dim, block_d))](
        slots, bounds, dw, dim, CHUNK=chunk, BLOCK_D=block_d, num_warps=4)
    return dw


class EmbeddingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight):
        ctx.save_for_backward(ids, weight)
        return embedding_forward(ids, weight)

    @staticmethod
    def backward(ctx, grad_out):
        ids, weight = ctx.saved_tensors
        return None, embedding_backward(ids, grad_out, weight)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """weight[ids]: ids (...) int32/int64, weight (V, d) -> (..., d); differentiable in weight."""
    _check_inputs("embedding", ids, weight)
    return EmbeddingFunction.apply(ids, weight)


def embedding_rmsnorm_forward(ids, weight, norm_weight, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    flat = ids.reshape(-1)
    n, dim = flat.numel(), weight.shape[1]
    x = torch.empty(n, dim, device=weight.device, dtype=weight.dtype)
    y = torch.empty_like(x)
    block_d = triton.next_power_of_2(dim)
    block_t = max(1, min(16, 8192 // block_d))
    _embedding_rmsnorm_fwd_kernel[(triton.cdiv(n, block_t),)](
        flat, weight, norm_weight, x, y, n, dim, weight.stride(0), eps, BLOCK_T=block_t, BLOCK_D=block_d,
        num_warps=8 if block_d >= 2048 else 4)
    return x.view(*ids.shape, dim), y.view(*ids.shape, dim)


def embedding_rmsnorm_backward(ids, grad_x, grad_y, weight, norm_weight, eps: float):
    flat = ids.reshape(-1)
    n = flat.numel()
    vocab, dim = weight.shape
    gx = grad_x.reshape(-1, dim).contiguous()
    gy = grad_y.reshape(-1, dim).contiguous()
    sorted_ids, perm, bounds = _sorted_tokens(flat, vocab)
    chunk = _chunk_size(n, vocab)
    chunks = triton.cdiv(n, chunk)
    slots_x = torch.empty(2 * chunks, dim, device=weight.device, dtype=torch.float32)
    slots_y = torch.empty_like(slots_x)
    sum_x = torch.empty(vocab, dim, device=weight.device, dtype=torch.float32)
    sum_y = torch.empty_like(sum_x)
    block_d = _row_block(dim)
    _embedding_bwd_chunks_kernel[(chunks, triton.cdiv(dim, block_d))](
        gx, gy, sorted_ids, perm, bounds, slots_x, slots_y, sum_x, sum_y, n, dim,
        CHUNK=chunk, TWO_GRADS=True, BLOCK_T=min(32, chunk), BLOCK_D=block_d, num_warps=4)
    dw = torch.empty(vocab, dim, device=weight.device, dtype=weight.dtype)
    dg_rows = torch.empty(vocab, dim, device=weight.device, dtype=torch.float32)
    full_d = triton.next_power_of_2(dim)
    _embedding_rmsnorm_bwd_rows_kernel[(vocab,)](
        slots_x, slots_y, sum_x, sum_y, bounds, weight, norm_weight, dw, dg_rows, dim, weight.stride(0), eps,
        CHUNK=chunk, BLOCK_D=full_d, num_warps=8 if full_d >= 2048 else 4)
    return dw, dg_rows.sum(0).to(norm_weight.dtype)


class EmbeddingRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, norm_weight, eps):
        ctx.save_for_backward(ids, weight, norm_weight)
        ctx.eps = eps
        return embedding_rmsnorm_forward(ids, weight, norm_weight, eps)

    @staticmethod
    def backward(ctx, grad_x, grad_y):
        ids, weight, norm_weight = ctx.saved_tensors
        dw, dg = embedding_rmsnorm_backward(ids, grad_x, grad_y, weight, norm_weight, ctx.eps)
        return None, dw, dg, None


def embedding_rmsnorm(
    ids: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight[ids], RMSNorm(weight[ids]) * norm_weight), both (..., d) in weight's dtype.

    Differentiable in weight and norm_weight; the first is the residual stream, the second the first
    block's input.
    """
    _check_inputs("embedding_rmsnorm", ids, weight, norm_weight)
    if ids.numel() == 0:
        raise KernelInputError("embedding_rmsnorm: ids is empty")
    return EmbeddingRMSNormFunction.apply(ids, weight, norm_weight, float(eps))
