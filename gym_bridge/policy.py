"""The kernel-writing policy: sampling replies with their log-probs, and re-scoring them for the trainer.

`Policy` is the interface the RL loop needs; `ByteLMPolicy` implements it for our byte-level model. A
prompt is raw bytes (``<bos><raw>`` + UTF-8); a reply is raw bytes until the first symbol that is not a
raw byte (``</raw>``, EOS or any other special/compressed id ends it) or ``max_bytes``. Replies keep the
policy's own symbols (``Sample.tokens``), so re-scoring never depends on a lossy UTF-8 round trip, and
another policy (e.g. a transformers causal LM with its tokenizer) can implement the same interface.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ContextManager, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from proxycomp.generate import DECODE_MODES, raw_bytes, restriction_bias
from proxycomp.generate import generate as sample_symbols
from proxycomp.model import Transformer
from proxycomp.vocab import PAD, RAW_PROMPT_OPENING, SENTINELS, is_raw_byte, raw_prompt, raw_reply_ids


@dataclass
class Sample:
    """One sampled reply."""

    text: str  # the reply's raw bytes as UTF-8 (invalid bytes replaced)
    tokens: list[int]  # the policy's symbols for the reply, ending with the stop symbol when one was drawn
    logprobs: list[float]  # rollout log-prob of each symbol under softmax(logits / temperature)
    truncated: bool  # max_bytes reached before a stop symbol


@dataclass
class ScoredReplies:
    """Per-symbol scores of a batch of replies, right-padded to the longest reply."""

    logprobs: torch.Tensor  # (B, L), differentiable when scored with grad
    mask: torch.Tensor  # (B, L) bool, True on reply symbols
    entropy: torch.Tensor  # (B, L) detached entropy of each position's distribution, in nats


@runtime_checkable
class Policy(Protocol):
    """What the rollout and the trainer need from a policy."""

    module: nn.Module  # the parameters the trainer optimizes

    def generate(
        self, prompts: Sequence[str], n: int, max_bytes: int, temperature: float, top_p: float,
        generator: torch.Generator | None = None,
    ) -> list[list[Sample]]:
        """``n`` samples per prompt (outer list in prompt order)."""
        ...

    def score(self, prompts: Sequence[str], replies: Sequence[Sequence[int]], temperature: float) -> ScoredReplies:
        """Log-probs of the reply symbols given their prompts, batched; differentiable unless under no_grad."""
        ...

    def encode_reply(self, text: str) -> list[int]:
        """The symbols of a complete reply written by someone else (warm-start targets), stop symbol included."""
        ...


class ByteLMPolicy:
    """Our byte-level `Transformer` as a policy; sampling uses the batched KV-cache sampler.

    ``autocast`` is entered around every forward (e.g. ``fabric.autocast``), so sampling and scoring run
    in the same precision; on bf16 GPUs their remaining difference is what mismatch correction handles.
    ``max_context`` bounds prompt + reply symbols; longer prompts are an error (cut them with the
    episode's ``max_bytes``), so the model never sees positions beyond what it was trained on silently.
    ``gpu_turn`` is entered around each sampling call, e.g. ``DeviceLock.share`` of the GPU the gym times
    on, so no candidate is timed while the policy computes beside it.
    """

    STOP = SENTINELS["raw"][1]

    def __init__(
        self,
        model: Transformer,
        *,
        max_context: int | None = None,
        autocast: Callable[[], ContextManager] = contextlib.nullcontext,
        score_batch: int = 8,
        decode: str = "auto",
        gpu_turn: Callable[[], ContextManager] = contextlib.nullcontext,
    ) -> None:
        self.module = model
        self.gpu_turn = gpu_turn
        self.max_context = max_context if max_context is not None else model.config.max_seq_len
        self.autocast = autocast
        if score_batch < 1:
            raise ValueError(f"score_batch: must be >= 1, got {score_batch}")
        self.score_batch = score_batch
        if decode not in DECODE_MODES:
            raise ValueError(f"decode: one of {', '.join(DECODE_MODES)}, got {decode!r}")
        self.decode = decode  # the sampler's loop (proxycomp.generate): "auto" replays a CUDA graph on a GPU
        # Replies are raw bytes: sampling and scoring both use the distribution restricted to raw bytes and the
        # two stops, so a proxy model's compressed-view ids can neither end a reply early nor skew the ratios.
        self._allowed = raw_reply_ids(model.config.vocab_size)
        self._stop_ids = [i for i in self._allowed if not is_raw_byte(i)]

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    def encode_prompt(self, prompt: str) -> list[int]:
        return raw_prompt(prompt.encode("utf-8"))

    def encode_reply(self, text: str) -> list[int]:
        return raw_prompt(text.encode("utf-8"))[RAW_PROMPT_OPENING:] + [self.STOP]

    def _check_length(self, prompt_ids: Sequence[int], reply_len: int, what: str) -> None:
        if len(prompt_ids) + reply_len > self.max_context:
            raise ValueError(
                f"{what}: prompt ({len(prompt_ids)} symbols) + reply ({reply_len}) exceeds the policy's context of "
                f"{self.max_context}; lower rollout.prompt_max_bytes or rollout.max_bytes"
            )

    def generate(
        self, prompts: Sequence[str], n: int, max_bytes: int, temperature: float, top_p: float,
        generator: torch.Generator | None = None,
    ) -> list[list[Sample]]:
        if n < 1 or max_bytes < 1:
            raise ValueError(f"n and max_bytes: must be >= 1, got n={n} max_bytes={max_bytes}")
        if temperature <= 0:
            raise ValueError(f"temperature: must be > 0 for RL sampling (log-probs are taken at it), got {temperature}")
        encoded = [self.encode_prompt(p) for p in prompts]
        for ids in encoded:
            self._check_length(ids, max_bytes, "generate")
        with self.gpu_turn(), self.autocast():
            out = sample_symbols(
                self.module, [ids for ids in encoded for _ in range(n)], max_bytes, temperature=temperature,
                top_p=top_p if top_p < 1.0 else None, stop_ids=self._stop_ids, generator=generator,
                allowed_ids=self._allowed, decode=self.decode,
            )
        samples = []
        for tokens, logprobs in zip(out.ids, out.logprobs):
            stopped = bool(tokens) and not is_raw_byte(tokens[-1])
            text = raw_bytes(tokens).decode("utf-8", errors="replace")
            samples.append(Sample(text, list(tokens), list(logprobs), truncated=not stopped))
        return [samples[i * n:(i + 1) * n] for i in range(len(prompts))]

    def score(self, prompts: Sequence[str], replies: Sequence[Sequence[int]], temperature: float) -> ScoredReplies:
        if len(prompts) != len(replies):
            raise ValueError(f"score: {len(prompts)} prompts but {len(replies)} replies")
        if temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {temperature}")
        if not replies:
            raise ValueError("score: empty batch")
        parts = [
            self._score_chunk(prompts[i:i + self.score_batch], replies[i:i + self.score_batch], temperature)
            for i in range(0, len(prompts), self.score_batch)
        ]
        width = max(p.logprobs.shape[1] for p in parts)

        def cat(name: str, fill) -> torch.Tensor:
            tensors = [getattr(p, name) for p in parts]
            return torch.cat([F.pad(t, (0, width - t.shape[1]), value=fill) for t in tensors])

        return ScoredReplies(cat("logprobs", 0.0), cat("mask", False), cat("entropy", 0.0))

    def _score_chunk(
        self, prompts: Sequence[str], replies: Sequence[Sequence[int]], temperature: float
    ) -> ScoredReplies:
        encoded = [self.encode_prompt(p) for p in prompts]
        for ids, reply in zip(encoded, replies):
            self._check_length(ids, len(reply), "score")
        # Right padding: each row is one document starting at position 0, as in the sampler.
        rows = [ids + list(reply) for ids, reply in zip(encoded, replies)]
        width = max(len(r) for r in rows)
        device = self.device
        tokens = torch.full((len(rows), width), PAD, dtype=torch.long, device=device)
        for i, row in enumerate(rows):
            tokens[i, :len(row)] = torch.tensor(row, device=device)
        with self.autocast():
            logits = self.module(tokens)
        logits = (logits.float() + restriction_bias(logits.shape[-1], self._allowed, device)) / temperature
        reply_width = max((len(r) for r in replies), default=0)
        # Reply symbol j of row i is predicted at position len(prompt_i) - 1 + j.
        offsets = torch.tensor([len(ids) - 1 for ids in encoded], device=device)
        cols = offsets[:, None] + torch.arange(reply_width, device=device)[None, :]
        lengths = torch.tensor([len(r) for r in replies], device=device)
        mask = torch.arange(reply_width, device=device)[None, :] < lengths[:, None]
        cols = torch.where(mask, cols, torch.zeros_like(cols))
        picked = logits.gather(1, cols[:, :, None].expand(-1, -1, logits.shape[-1]))
        log_dist = picked.log_softmax(-1)
        targets = tokens.gather(1, (cols + 1).clamp(max=width - 1))
        logprobs = log_dist.gather(-1, targets[:, :, None])[:, :, 0]
        logprobs = torch.where(mask, logprobs, torch.zeros_like(logprobs))
        with torch.no_grad():
            probs = log_dist.exp()  # 0 (with log -inf) outside the raw-reply symbols
            entropy = -(probs * log_dist.masked_fill(probs == 0, 0.0)).sum(-1) * mask
        return ScoredReplies(logprobs, mask, entropy)
