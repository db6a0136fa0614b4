"""A decoder-only transformer over the shared symbol vocabulary (nanoGPT-sized, read top to bottom).

RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases. Packed windows hold several documents:
`doc_ids` keeps attention inside a document and `positions` (0 at each document start) drives RoPE,
so a document sees the same positions whether it starts a window or sits in the middle of one.
Attention and embedding backends are chosen by name; the Triton ones live in `proxycomp.kernels`. The
Triton embedding gathers the rows and applies the first block's attention RMSNorm in one kernel.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from proxycomp.errors import UserError
from proxycomp.kernels.ops import define_op
from proxycomp.kernels.reference import apply_rope, document_runs

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

EMBED_BACKENDS = ("torch", "triton")


class ModelConfigError(UserError):
    """A model hyper-parameter that cannot work; the message names the field."""


@dataclass
class ModelConfig:
    """The transformer's shape and kernels.

    Args:
        vocab_size: symbols in the shared vocabulary (linked from the data module by the CLI)
        d_model: width of the residual stream
        n_layers: transformer blocks
        n_heads: query heads (head size is d_model / n_heads, even for RoPE)
        n_kv_heads: key/value heads (grouped-query attention); null: as many as n_heads
        ffn_hidden: SwiGLU hidden width; null: 8/3 * d_model rounded up to a multiple of 64
        max_seq_len: the training context and the default evaluation window (linked from data.seq_len)
        rope_theta: RoPE base (EvaByte's value)
        norm_eps: RMSNorm epsilon
        tie_embeddings: share the embedding matrix with the output head
        attn_backend: sdpa (torch), triton (proxycomp's document-masked kernel), flash_attn, or flex (torch's
            FlexAttention with a block mask of the documents: fast only inside torch.compile; forward only on CPU)
        embed_backend: torch, or triton (proxycomp's embedding kernel)
    """

    vocab_size: int = 320
    d_model: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int | None = None
    ffn_hidden: int | None = None
    max_seq_len: int = 2048
    rope_theta: float = 1e5
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attn_backend: str = "sdpa"
    embed_backend: str = "torch"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "max_seq_len"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ModelConfigError(f"model.arch.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ModelConfigError(f"model.arch.d_model ({self.d_model}) must be divisible by model.arch.n_heads "
                                   f"({self.n_heads})")
        if self.n_heads % self.kv_heads:
            raise ModelConfigError(f"model.arch.n_heads ({self.n_heads}) must be a multiple of model.arch.n_kv_heads "
                                   f"({self.kv_heads})")
        if self.head_dim % 2:
            raise ModelConfigError(f"RoPE needs an even head size; d_model/n_heads = {self.head_dim}")
        if self.attn_backend not in ATTENTION:  # the table of backends below
            raise ModelConfigError(f"unknown model.arch.attn_backend {self.attn_backend!r}; "
                                   f"valid: {', '.join(ATTENTION)}")
        if self.embed_backend not in EMBED_BACKENDS:
            raise ModelConfigError(f"unknown model.arch.embed_backend {self.embed_backend!r}; "
                                   f"valid: {', '.join(EMBED_BACKENDS)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_heads, or n_heads when it is null."""
        return self.n_kv_heads or self.n_heads

    @property
    def hidden(self) -> int:
        """The SwiGLU hidden width: ffn_hidden, or 8/3 * d_model rounded up to a multiple of 64 when it is null."""
        return self.ffn_hidden or 64 * math.ceil(8 * self.d_model / 3 / 64)


def matmul_params(config: ModelConfig) -> int:
    """Parameters that take part in a matmul per symbol: every projection plus the output head."""
    kv_dim = config.kv_heads * config.head_dim
    attn = 2 * config.d_model * config.d_model + 2 * config.d_model * kv_dim
    mlp = 3 * config.d_model * config.hidden
    return config.n_layers * (attn + mlp) + config.d_model * config.vocab_size


def flops_per_symbol(config: ModelConfig, context: int) -> float:
    """Training FLOPs per symbol (forward + backward) at `context` symbols of attention span.

    6·N for the matmul parameters N (projections and the output head; the embedding lookup is a
    gather, not a matmul) plus 12·L·d·context for the attention scores and the weighted sum, the
    PaLM/nanoGPT convention. The attention term counts the full context, ignoring causal and
    document masking, so the same number is comparable across runs and backends.
    """
    return 6 * matmul_params(config) + 12 * config.n_layers * config.d_model * context


def _load_kernel(module: str, field: str) -> ModuleType:
    try:
        return importlib.import_module(f"proxycomp.kernels.{module}")
    except ImportError as err:
        raise ModelConfigError(
            f"model.arch.{field}='triton' needs proxycomp.kernels.{module}, which failed to import ({err}); "
            f"use the torch backend instead"
        ) from err


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32: under bf16 autocast the mean of squares loses too much precision.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def _rope_cos_sin_of(positions, head_dim, theta):
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[..., None] * inv_freq
    return angles.cos(), angles.sin()


def _rope_shapes(positions, head_dim, theta):
    shape = (*positions.shape, head_dim // 2)
    return positions.new_empty(shape, dtype=torch.float32), positions.new_empty(shape, dtype=torch.float32)


# An opaque op: under a whole-model torch.compile Inductor otherwise fuses cos/sin into every layer's rotation,
# forward and backward, recomputing them per element (on the H200 ~27% of a d768 step). As an op they are made once
# per forward, and the graph need not break around them (a break would also cut the loss off from the model).
_rope_cos_sin = define_op("rope_angles", "(Tensor positions, int head_dim, float theta) -> (Tensor, Tensor)",
                          _rope_cos_sin_of, _rope_shapes)


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (B, T, head_dim/2) for integer positions (B, T)."""
    return _rope_cos_sin(positions, head_dim, float(theta))


def document_mask(q_doc: torch.Tensor, k_doc: torch.Tensor, q_start: int = 0) -> torch.Tensor:
    """(B, 1, Tq, Tk) boolean: key j is visible to query i if j <= q_start + i and both share a document."""
    tq, tk = q_doc.shape[1], k_doc.shape[1]
    q_idx = torch.arange(q_start, q_start + tq, device=q_doc.device)
    causal = torch.arange(tk, device=q_doc.device)[None, :] <= q_idx[:, None]
    return (causal & (q_doc[:, :, None] == k_doc[:, None, :]))[:, None]


def document_block_mask(doc_ids: torch.Tensor | None, batch: int, t: int, device: torch.device):
    """FlexAttention's BlockMask for causal attention inside documents, the runs of equal ids the triton kernel
    reads (one document per row when `doc_ids` is None)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if doc_ids is None:
        return create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, None, None, t, t, device=device)
    runs = document_runs(doc_ids)

    def same_document_causal(b, h, q_idx, kv_idx):
        return (runs[b, q_idx] == runs[b, kv_idx]) & (kv_idx <= q_idx)

    return create_block_mask(same_document_causal, batch, None, t, t, device=device)


def cu_seqlens(doc_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cumulative document lengths over the flattened (B*T) batch, for varlen kernels."""
    b, t = doc_ids.shape
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    start_idx = starts.flatten().nonzero().flatten()
    bounds = torch.cat([start_idx, start_idx.new_tensor([b * t])]).to(torch.int32)
    return bounds, int((bounds[1:] - bounds[:-1]).max())


# ---- attention backends: each takes q, k, v as (B, T, heads, head_dim) and returns (B, T, n_heads, head_dim) ----
# q and k come rotated by RoPE, except to a backend that `rotates` them itself and takes the angles too.
class SdpaAttention:
    """torch's scaled_dot_product_attention, with a dense document mask: the CPU path and the reference."""

    rotates = False

    def layout(self, doc_ids: torch.Tensor | None, batch: int, t: int, device: torch.device) -> None:
        return None

    def __call__(self, q, k, v, doc_ids: torch.Tensor | None, layout: None) -> torch.Tensor:
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if doc_ids is None:
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=document_mask(doc_ids, doc_ids), enable_gqa=True)
        return out.transpose(1, 2)


class TritonAttention:
    """proxycomp's document-masked flash attention; the document bounds are made once per forward. It takes q and k
    before RoPE: its backward kernels turn their gradients back through the rotation, a pass over dq and dk less."""

    rotates = True

    def __init__(self) -> None:  # resolved at construction: a missing kernel fails now, not mid-run
        kernel = _load_kernel("attention", "attn_backend")
        self.attend, self.bounds = kernel.flash_attention, kernel.document_bounds

    def layout(self, doc_ids: torch.Tensor | None, batch: int, t: int, device: torch.device):
        return None if doc_ids is None else self.bounds(doc_ids)

    def __call__(self, q, k, v, doc_ids: torch.Tensor | None, layout, rope) -> torch.Tensor:
        out = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), doc_bounds=layout, causal=True,
                          rope=rope)
        return out.transpose(1, 2)


class FlexAttention:
    """torch's FlexAttention with a block mask of the documents (made once per forward)."""

    rotates = False

    def __init__(self) -> None:
        from torch.nn.attention.flex_attention import flex_attention

        self.attend = flex_attention

    def layout(self, doc_ids: torch.Tensor | None, batch: int, t: int, device: torch.device) -> BlockMask:
        return document_block_mask(doc_ids, batch, t, device)

    def __call__(self, q, k, v, doc_ids: torch.Tensor | None, layout: BlockMask) -> torch.Tensor:
        out = self.attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=layout, enable_gqa=True)
        return out.transpose(1, 2)


class FlashAttnVarlen:
    """The flash-attn package's varlen kernel over the flattened batch, one sequence per document."""

    rotates = False

    def __init__(self) -> None:
        try:
            from flash_attn import flash_attn_varlen_func
        except ImportError as err:
            raise ModelConfigError(f"model.arch.attn_backend='flash_attn' needs the flash-attn package ({err}); "
                                   f"install it or use 'sdpa'/'triton'") from err
        self.attend = flash_attn_varlen_func

    def layout(self, doc_ids: torch.Tensor | None, batch: int, t: int, device: torch.device) -> None:
        return None

    def __call__(self, q, k, v, doc_ids: torch.Tensor | None, layout: None) -> torch.Tensor:
        b, t, h, d = q.shape
        if doc_ids is None:
            doc_ids = torch.zeros(b, t, dtype=torch.long, device=q.device)
        bounds, longest = cu_seqlens(doc_ids)
        out = self.attend(q.reshape(b * t, h, d), k.reshape(b * t, -1, d), v.reshape(b * t, -1, d),
                          cu_seqlens_q=bounds, cu_seqlens_k=bounds, max_seqlen_q=longest, max_seqlen_k=longest,
                          causal=True)
        if isinstance(out, tuple):  # some flash-attn releases also return the log-sum-exp
            out = out[0]
        return out.view(b, t, h, d)


ATTENTION = {"sdpa": SdpaAttention, "triton": TritonAttention, "flash_attn": FlashAttnVarlen, "flex": FlexAttention}


class KVCache:
    """Keys and values of every layer for batched decoding, plus the document id of each cached slot.

    Two ways to fill it. By default each forward appends after the `length` symbols already cached and attends
    to those only. With `slot` set (a (1,) device tensor), a forward takes one symbol, writes it at that slot
    and attends over the whole buffer under a mask: every shape is fixed, so a CUDA graph can capture the step
    and replay it with the slot advanced on the device (`proxycomp.generate`)."""

    def __init__(self, config: ModelConfig, batch: int, capacity: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        shape = (batch, config.kv_heads, capacity, config.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.n_layers)]
        self.doc_ids = torch.zeros(batch, capacity, device=device, dtype=torch.long)
        self.length = 0
        self.slot: torch.Tensor | None = None

    def visible(self, q_doc: torch.Tensor) -> torch.Tensor:
        """Record the new symbols' documents (B, T); return the (B, 1, T, slots) mask of what each of them sees."""
        if self.slot is None:
            start, end = self.length, self.length + q_doc.shape[1]
            self.doc_ids[:, start:end] = q_doc
            return document_mask(q_doc, self.doc_ids[:, :end], q_start=start)
        if q_doc.shape[1] != 1:
            raise ValueError(f"a KVCache with a fixed slot takes one symbol per forward, got {q_doc.shape[1]}")
        self.doc_ids.index_copy_(1, self.slot, q_doc)
        causal = torch.arange(self.doc_ids.shape[1], device=q_doc.device) <= self.slot
        return (causal & (self.doc_ids == q_doc))[:, None, None, :]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (B, Hkv, T, D) keys/values after the cached ones (or at `slot`); return what `visible` masks."""
        if self.slot is not None:
            self.k[layer].index_copy_(2, self.slot, k.to(self.k[layer].dtype))  # autocast may give bf16
            self.v[layer].index_copy_(2, self.slot, v.to(self.v[layer].dtype))
            return self.k[layer], self.v[layer]
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, t: int) -> None:
        if self.slot is None:  # a fixed slot is advanced by whoever owns it, on the device
            self.length += t


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.config, self.layer = config, layer
        hd = config.head_dim
        self.wq = nn.Linear(config.d_model, config.n_heads * hd, bias=False)
        self.wk = nn.Linear(config.d_model, config.kv_heads * hd, bias=False)
        self.wv = nn.Linear(config.d_model, config.kv_heads * hd, bias=False)
        self.wo = nn.Linear(config.n_heads * hd, config.d_model, bias=False)
        self.attend = ATTENTION[config.attn_backend]()

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        doc_ids: torch.Tensor | None,
        cache: KVCache | None = None,
        cache_mask: torch.Tensor | None = None,
        doc_layout: tuple[torch.Tensor, torch.Tensor] | BlockMask | None = None,
    ) -> torch.Tensor:
        """`doc_layout`: the backend's form of `doc_ids`, made once per model forward: the triton backend's document
        bounds (given with doc_ids), the flex backend's block mask (always)."""
        b, t, _ = x.shape
        cfg = self.config
        q = self.wq(x).view(b, t, cfg.n_heads, cfg.head_dim)
        k = self.wk(x).view(b, t, cfg.kv_heads, cfg.head_dim)
        v = self.wv(x).view(b, t, cfg.kv_heads, cfg.head_dim)
        if cache is not None:
            # Decoding: queries and keys differ in length, which only the sdpa path takes.
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            k_all, v_all = cache.append(self.layer, k.transpose(1, 2), v.transpose(1, 2))
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k_all, v_all, attn_mask=cache_mask, enable_gqa=True)
            out = out.transpose(1, 2)
        elif self.attend.rotates:
            out = self.attend(q, k, v, doc_ids, doc_layout, rope)
        else:
            out = self.attend(apply_rope(q, *rope), apply_rope(k, *rope), v, doc_ids, doc_layout)
        return self.wo(out.reshape(b, t, cfg.n_heads * cfg.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w_gate = nn.Linear(config.d_model, config.hidden, bias=False)
        self.w_up = nn.Linear(config.d_model, config.hidden, bias=False)
        self.w_down = nn.Linear(config.hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = Attention(config, layer)
        self.mlp_norm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        doc_ids: torch.Tensor | None,
        cache: KVCache | None = None,
        cache_mask: torch.Tensor | None = None,
        doc_layout: tuple[torch.Tensor, torch.Tensor] | BlockMask | None = None,
        normed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`normed`: attn_norm(x) when the caller already has it (the Triton embedding makes block 0's)."""
        h = self.attn_norm(x) if normed is None else normed
        x = x + self.attn(h, rope, doc_ids, cache, cache_mask, doc_layout)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by depth.
        for name, p in self.named_parameters():
            if name.endswith(("attn.wo.weight", "mlp.w_down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layers))
        self.doc_layout = ATTENTION[config.attn_backend]().layout
        if config.embed_backend == "triton":
            self._embedding_rmsnorm = _load_kernel("embedding", "embed_backend").embedding_rmsnorm

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def embed_ids(
        self, input_ids: torch.Tensor, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The embedded symbols, and block 0's attn_norm of them where the triton backend made it (else None).

        Decoding with a KV cache takes the torch path, as it is simpler: a step embeds one or a few symbols per
        row, too few for the fused kernel to matter, and the CUDA-graph step of `proxycomp.generate` stays torch.
        """
        if self.config.embed_backend == "triton" and cache is None:
            norm = self.blocks[0].attn_norm
            return self._embedding_rmsnorm(input_ids, self.embed.weight, norm.weight, norm.eps)
        return self.embed(input_ids), None

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        doc_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Logits (B, T, vocab) for symbols (B, T).

        `positions` default to 0..T-1 (after the cached symbols when decoding); `doc_ids` None means
        one document per row. With a `cache`, the new symbols' keys are appended to it and
        `doc_ids` names their documents (left padding in a batch gets its own document).
        """
        b, t = input_ids.shape
        if positions is None:
            if cache is not None and cache.slot is not None:
                raise ValueError("decoding at a fixed cache slot needs explicit positions")
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + t, device=input_ids.device).expand(b, t)
        rope = rope_angles(positions, self.config.head_dim, self.config.rope_theta)
        cache_mask = None
        if cache is not None:
            cache_mask = cache.visible(doc_ids if doc_ids is not None else torch.zeros_like(input_ids))
        # once here rather than in every layer (decoding with a cache takes sdpa, which needs none)
        doc_layout = None if cache is not None else self.doc_layout(doc_ids, b, t, input_ids.device)
        x, normed = self.embed_ids(input_ids, cache)
        for block in self.blocks:
            x = block(x, rope, doc_ids, cache, cache_mask, doc_layout, normed)
            normed = None  # only block 0's input comes from the embedding
        if cache is not None:
            cache.advance(t)
        return self.head(self.norm(x))
