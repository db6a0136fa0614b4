"""Batched sampling with a KV cache (raw bytes in, raw bytes out for `proxycomp generate` and the RL policy).

Prompts of different lengths are left-padded; the padding is its own document, so no real symbol
attends to it, and positions count from each prompt's first real symbol. Decoding stops per row at
the first stop id. The log-probability of each drawn symbol is returned under softmax(logits / T),
before top-k/top-p truncation: that is the sampling policy's own probability, which RL needs.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from proxycomp.model import KVCache, Transformer
from proxycomp.vocab import (
    EOS,
    PAD,
    RAW_OFFSET,
    SENTINELS,
    is_raw_byte,
)

DEFAULT_STOP_IDS = (EOS, SENTINELS["raw"][1])
# Steps between checks whether every row has stopped: each check is a host sync, which on a GPU keeps the host from
# queueing the next steps; rows that stopped keep sampling until the check and are trimmed, so the output is the same.
DONE_CHECK_EVERY = 16
DECODE_MODES = ("auto", "dynamic", "static", "graph")


@dataclass
class Generation:
    ids: list[list[int]]  # new symbols per prompt, ending with the stop id when one was drawn
    logprobs: list[list[float]]  # log-probability of each of those symbols


def _truncate(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Set to -inf every logit outside the top-k and outside the smallest set with mass >= top_p."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a symbol when the mass before it already reaches top_p; the most likely one always stays.
        drop_sorted = probs.cumsum(-1) - probs >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _draw(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next symbols (B,) and their log-probabilities; temperature 0 means greedy (log-probs at T = 1)."""
    logits = logits.float()
    if temperature == 0:
        ids = logits.argmax(-1)
        return ids, F.log_softmax(logits, -1).gather(-1, ids[:, None])[:, 0]
    scaled = logits / temperature
    probs = _truncate(scaled, top_k, top_p).softmax(-1)
    ids = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return ids, F.log_softmax(scaled, -1).gather(-1, ids[:, None])[:, 0]


def restriction_bias(vocab_size: int, allowed_ids: Sequence[int], device: torch.device | str) -> torch.Tensor:
    """(vocab,) logit bias: 0 on `allowed_ids`, -inf elsewhere."""
    bias = torch.full((vocab_size,), float("-inf"), device=device)
    bias[torch.tensor(list(allowed_ids), device=device, dtype=torch.long)] = 0.0
    return bias


def _fixed_slot_decoder(
    model: Transformer, cache: KVCache, lengths: torch.Tensor, width: int, graph: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    """`step(ids (B,)) -> next logits (B, vocab)` over a cache with a fixed slot (see KVCache): one launch of a
    CUDA graph per symbol when `graph`, instead of a few hundred kernel launches that the host cannot queue as
    fast as a small model runs them. The logits tensor is reused by the next step."""
    device = lengths.device
    cache.slot = torch.full((1,), width, dtype=torch.long, device=device)
    ids_in = torch.zeros(len(lengths), 1, dtype=torch.long, device=device)
    doc = torch.ones_like(ids_in)

    def forward() -> torch.Tensor:
        return model(ids_in, (lengths + (cache.slot - width))[:, None], doc, cache=cache)[:, -1]

    compute = forward
    if graph:
        # Warm-up runs (lazy cuBLAS and kernel set-up) belong on a side stream before capture. They write at
        # slot `width`, which the first real step overwrites. Autocast must not cache casts inside a graph.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            forward()
        torch.cuda.current_stream(device).wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        autocast = torch.is_autocast_enabled("cuda")
        with torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=autocast, cache_enabled=False):
            with torch.cuda.graph(captured):
                logits = forward()

        def compute(graph_inputs=(ids_in, doc, lengths)) -> torch.Tensor:
            # The replay reads its inputs at the addresses it captured, so they must live as long as the graph:
            # a freed `doc` (nothing else holds it) was reused by the sampler's tensors and corrupted whole rows.
            captured.replay()
            return logits

    def step(ids: torch.Tensor) -> torch.Tensor:
        ids_in.copy_(ids[:, None])
        out = compute()
        cache.slot += 1
        return out

    return step


@torch.no_grad()
def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_ids: Sequence[int] = DEFAULT_STOP_IDS,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    allowed_ids: Sequence[int] | None = None,
    decode: str = "auto",
) -> Generation:
    """Continue each prompt (a list of symbol ids) by up to `max_new_tokens` symbols. With `allowed_ids`,
    symbols are drawn (and their log-probs taken) from the distribution restricted to those ids.

    `decode` picks the loop after the prompt: "dynamic" attends to the filled cache only; "static" attends
    over the whole cache under a mask, every shape fixed; "graph" runs the static step as a CUDA graph;
    "auto" is "graph" on a GPU and "dynamic" elsewhere. All four draw the same symbols up to rounding."""
    vocab_size = model.config.vocab_size
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one prompt and no empty prompt")
    if any(not 0 <= i < vocab_size for p in prompts for i in p):
        raise ValueError(f"prompt ids must lie in [0, {vocab_size})")
    if max_new_tokens < 0 or temperature < 0:
        raise ValueError(f"max_new_tokens and temperature must be >= 0, got {max_new_tokens} and {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {', '.join(DECODE_MODES)}, got {decode!r}")
    param = next(model.parameters())
    device = param.device
    if decode == "auto":
        decode = "graph" if device.type == "cuda" else "dynamic"
    if decode == "graph" and device.type != "cuda":
        raise ValueError(f"decode='graph' needs the model on a CUDA device, it is on {device}")
    if generator is None and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)

    batch, width = len(prompts), max(len(p) for p in prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    tokens = torch.full((batch, width), PAD, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt):] = torch.tensor(list(prompt), device=device)
    pad = (width - lengths)[:, None]
    columns = torch.arange(width, device=device)[None, :]
    doc_ids = (columns >= pad).long()  # 0: left padding, 1: the prompt and its continuation
    positions = (columns - pad).clamp(min=0)

    was_training = model.training
    model.eval()
    cache = KVCache(model.config, batch, width + max_new_tokens, device, param.dtype)
    bias = None if allowed_ids is None else restriction_bias(vocab_size, allowed_ids, device)
    logits = model(tokens, positions, doc_ids, cache=cache)[:, -1]
    if decode == "dynamic":
        def step(ids: torch.Tensor) -> torch.Tensor:
            return model(ids[:, None], (lengths + cache.length - width)[:, None], torch.ones_like(ids)[:, None],
                         cache=cache)[:, -1]
    elif max_new_tokens > 1:
        step = _fixed_slot_decoder(model, cache, lengths, width, graph=decode == "graph")
    stops = torch.tensor(list(stop_ids), device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    new_ids, new_logprobs, finished_at = [], [], torch.full((batch,), max_new_tokens, device=device)
    for i in range(max_new_tokens):
        ids, logprobs = _draw(logits if bias is None else logits.float() + bias, temperature, top_k, top_p, generator)
        new_ids.append(ids)
        new_logprobs.append(logprobs)
        hit = torch.isin(ids, stops) & ~done
        finished_at.masked_fill_(hit, i + 1)  # not finished_at[hit] = ...: boolean indexing syncs the host
        done |= hit
        if i == max_new_tokens - 1 or ((i + 1) % DONE_CHECK_EVERY == 0 and bool(done.all())):
            break
        logits = step(ids)
    model.train(was_training)

    if not new_ids:
        return Generation([[] for _ in prompts], [[] for _ in prompts])
    ids_all = torch.stack(new_ids, 1).tolist()
    logprobs_all = torch.stack(new_logprobs, 1).tolist()
    ends = finished_at.tolist()
    return Generation([r[:n] for r, n in zip(ids_all, ends)], [r[:n] for r, n in zip(logprobs_all, ends)])


def raw_bytes(ids: Sequence[int]) -> bytes:
    """The raw bytes a generation spells, up to its first symbol that is not a raw byte."""
    out = bytearray()
    for i in ids:
        if not is_raw_byte(i):
            break
        out.append(i - RAW_OFFSET)
    return bytes(out)
