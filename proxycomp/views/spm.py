"""The tokenizer view: a SentencePiece BPE model used as a compressor, with an exact byte round trip.

SentencePiece alone is not a bijection on bytes: it cannot take invalid UTF-8, and it turns spaces into
U+2581 so a literal U+2581 would come back as a space. The encoder therefore sends only valid text without
U+2581 through the model and spells everything else with the model's ``<0xNN>`` byte pieces; decoding maps
each piece to its bytes from a table built here (never ``DecodeIds``, which re-interprets bytes as text).
"""
from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator

import numpy as np
import sentencepiece as spm

from proxycomp.views.base import SYMBOL_DTYPE, CorruptViewError, View, ViewError

# Runs that bypass the model: surrogate escapes (invalid UTF-8 bytes) and U+2581 (SentencePiece's space mark).
_BYTE_SPELLED = re.compile("([\udc80-\udcff\u2581]+)")
_SPACE_MARK = "\u2581"
# Training sentences are cut at line ends to at most this many bytes (SentencePiece's own limit is 4192).
MAX_SENTENCE_BYTES = 4096


class SpmView(View):
    """Symbols are the ids of a trained SentencePiece model (`model` is its serialized proto)."""

    name = "spm"

    @classmethod
    def symbols(cls, config) -> int:
        return config.spm_vocab_size

    @classmethod
    def from_config(cls, offset: int, config, spm_model: bytes | None) -> SpmView:
        if spm_model is None:
            raise ViewError("the spm view needs a trained SentencePiece model (train_spm) before it is built")
        return cls(offset, config.spm_vocab_size, spm_model)

    def __init__(self, offset: int, size: int, model: bytes) -> None:
        super().__init__(offset, size)
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        except RuntimeError as err:
            raise ViewError(f"spm view: the SentencePiece model does not load ({err})") from None
        pieces = self._sp.get_piece_size()
        if pieces > size:
            raise ViewError(f"spm view: the model has {pieces} pieces but the vocabulary reserves {size}")
        byte_ids = [self._sp.piece_to_id(f"<0x{b:02X}>") for b in range(256)]
        if not all(self._sp.is_byte(i) for i in byte_ids):
            raise ViewError("spm view: the model was trained without byte_fallback; retrain with byte_fallback=True")
        self.model = model
        self._byte_ids = np.asarray(byte_ids, dtype=SYMBOL_DTYPE) + offset
        # Per local id: the exact bytes it stands for; None for ids that never come out of `encode`.
        self._piece_bytes: list[bytes | None] = [None] * pieces
        for i in range(pieces):
            if self._sp.is_byte(i):
                self._piece_bytes[i] = bytes([int(self._sp.id_to_piece(i)[3:5], 16)])
            elif not (self._sp.is_control(i) or self._sp.is_unknown(i) or self._sp.is_unused(i)):
                self._piece_bytes[i] = self._sp.id_to_piece(i).replace(_SPACE_MARK, " ").encode("utf-8")

    def encode_array(self, data: bytes) -> np.ndarray:
        text = data.decode("utf-8", errors="surrogateescape")
        parts: list[np.ndarray] = []
        for i, part in enumerate(_BYTE_SPELLED.split(text)):
            if not part:
                continue
            raw = part.encode("utf-8", errors="surrogateescape")
            if i % 2:  # a captured run: spell it byte by byte
                parts.append(self._byte_ids[np.frombuffer(raw, dtype=np.uint8)])
                continue
            ids = self._sp.encode(part)
            # Guard against any normalization the model still applies: fall back to bytes if it would not
            # round-trip. With identity normalization this never fires on the inputs we have tried.
            if b"".join(map(self._piece_bytes.__getitem__, ids)) != raw:
                parts.append(self._byte_ids[np.frombuffer(raw, dtype=np.uint8)])
            else:
                parts.append(np.asarray(ids, dtype=SYMBOL_DTYPE) + self.offset)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=SYMBOL_DTYPE)

    def _decode_local(self, local: np.ndarray) -> bytes:
        out = []
        for i in local.tolist():
            piece = self._piece_bytes[i] if i < len(self._piece_bytes) else None
            if piece is None:
                raise CorruptViewError(f"spm view: symbol id {i + self.offset} is not a text or byte piece")
            out.append(piece)
        return b"".join(out)


def training_sentences(documents: Iterable[bytes], budget_bytes: int, seed: int) -> Iterator[str]:
    """Up to `budget_bytes` of SentencePiece training sentences from documents visited in a seeded order.

    A sentence is a run of whole lines (newlines kept, so pieces like ``"):\\n"`` are learned), cut to at
    most MAX_SENTENCE_BYTES; text the encoder spells in bytes is left out.
    """
    docs = list(documents)
    order = np.random.default_rng(seed).permutation(len(docs))
    used = 0
    for k in order.tolist():
        text = docs[k].decode("utf-8", errors="surrogateescape")
        for j, part in enumerate(_BYTE_SPELLED.split(text)):
            if j % 2 or not part:
                continue
            sentence = ""
            for line in part.splitlines(keepends=True):
                while len(line.encode("utf-8")) > MAX_SENTENCE_BYTES:
                    head, line = line[: MAX_SENTENCE_BYTES // 4], line[MAX_SENTENCE_BYTES // 4 :]
                    yield from _flush(sentence)
                    sentence = head
                if len((sentence + line).encode("utf-8")) > MAX_SENTENCE_BYTES:
                    yield from _flush(sentence)
                    sentence = ""
                sentence += line
                used += len(line)
            yield from _flush(sentence)
            if used >= budget_bytes:
                return


def _flush(sentence: str) -> Iterator[str]:
    if sentence:
        yield sentence


def train_spm(documents: Iterable[bytes], vocab_size: int, budget_bytes: int = 20_000_000, seed: int = 0) -> bytes:
    """Train a byte-fallback BPE model on (a seeded sample of) `documents`; returns the serialized model.

    Identity normalization, no dummy prefix, whitespace kept and allowed to form pieces (indentation),
    digits not split. `hard_vocab_limit=False` lets a small corpus yield fewer pieces than `vocab_size`.
    """
    if vocab_size < 300:
        raise ViewError(f"spm_vocab_size must be at least 300 (256 byte pieces + text pieces), got {vocab_size}")
    sentences = list(training_sentences(documents, budget_bytes, seed))
    if not sentences:
        raise ViewError("spm view: no training text (the train split is empty or all bytes are non-text)")
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            split_digits=False,
            byte_fallback=True,
            character_coverage=0.9995,
            max_sentence_length=MAX_SENTENCE_BYTES + 96,
            input_sentence_size=0,
            unk_id=0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            num_threads=max(1, min(8, os.cpu_count() or 1)),
            minloglevel=2,
        )
    except RuntimeError as err:
        raise ViewError(f"spm view: SentencePiece training failed with spm_vocab_size={vocab_size}: {err}") from None
    return model.getvalue()
