"""Pure-torch references for every kernel in this package, computed in float32.

The tests compare the Triton kernels against these, and the model can use them as its CPU path.
Each returns its result in the input's dtype (math in float32, one rounding at the end).
"""
from __future__ import annotations

import math

import torch


def document_runs(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) document ids -> (B, S) index of the maximal run of equal ids each position sits in.

    The kernels define a document as a maximal run of equal consecutive ids; packing makes ids
    non-decreasing, and for such ids this is the same as "equal id".
    """
    change = torch.ones_like(doc_ids, dtype=torch.int64)
    change[:, 1:] = (doc_ids[:, 1:] != doc_ids[:, :-1]).to(torch.int64)
    return change.cumsum(dim=1)


def attention_mask(seq_len: int, doc_ids: torch.Tensor | None, causal: bool, batch: int, device) -> torch.Tensor:
    """Boolean (B, 1, S, S) mask, True where query i may attend key j."""
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
    allowed = allowed.expand(batch, 1, seq_len, seq_len)
    if doc_ids is not None:
        runs = document_runs(doc_ids.to(device))
        allowed = allowed & (runs[:, None, :, None] == runs[:, None, None, :])
    return allowed


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    doc_ids: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention with GQA and document masking; q (B, H, S, D), k/v (B, Hkv, S, D)."""
    batch, heads, seq_len, head_dim = q.shape
    group = heads // k.shape[1]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    scores = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    mask = attention_mask(seq_len, doc_ids, causal, batch, q.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), vf).to(q.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the two halves of each head (GPT-NeoX layout): x (B, T, heads, head_dim) by angles (B, T, head_dim/2),
    the same for every head."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[..., None, :], sin[..., None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).type_as(x)


def embedding_reference(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return weight.float()[ids].to(weight.dtype)


def rmsnorm_reference(x: torch.Tensor, norm_weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * norm_weight.float()).to(x.dtype)


def embedding_rmsnorm_reference(
    ids: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(embedding, RMSNorm(embedding)), both in weight's dtype; the norm reads the rounded embedding."""
    x = embedding_reference(ids, weight)
    return x, rmsnorm_reference(x, norm_weight, eps)
