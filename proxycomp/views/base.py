"""The view interface: a codec from document bytes to symbols in its own range of the shared vocabulary."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from proxycomp.errors import UserError
from proxycomp.vocab import BOS, EOS, SENTINELS

# Symbol arrays are int32: the largest vocabulary (raw + zstd + brotli + a 96K tokenizer) fits easily.
SYMBOL_DTYPE = np.int32


class ViewError(UserError):
    """A view cannot be built as configured (unknown name, bad option, unusable tokenizer model)."""


class CorruptViewError(UserError):
    """A symbol sequence does not decode: an id outside the view's range or a garbled compressed stream."""


class View(ABC):
    """One codec. `encode_array` is the fast path the data pipeline uses; `encode`/`decode` are exact inverses."""

    name: ClassVar[str]

    def __init__(self, offset: int, size: int) -> None:
        self.offset = offset
        self.size = size

    @classmethod
    @abstractmethod
    def symbols(cls, config) -> int:
        """How many ids of the shared vocabulary the view takes under `config` (a registry.ViewConfig)."""

    @classmethod
    @abstractmethod
    def from_config(cls, offset: int, config, spm_model: bytes | None) -> View:
        """The view at `offset` under `config` (a registry.ViewConfig; `spm_model`: a serialized SentencePiece
        model, for spm)."""

    @abstractmethod
    def encode_array(self, data: bytes) -> np.ndarray:
        """Global symbol ids (int32) for one document."""

    @abstractmethod
    def _decode_local(self, local: np.ndarray) -> bytes:
        """Bytes for ids already shifted into 0..size-1."""

    def encode(self, data: bytes) -> list[int]:
        return self.encode_array(data).tolist()

    def decode(self, ids: Sequence[int] | np.ndarray) -> bytes:
        local = np.asarray(ids, dtype=np.int64).reshape(-1) - self.offset
        bad = (local < 0) | (local >= self.size)
        if bad.any():
            first = int(local[bad.argmax()]) + self.offset
            raise CorruptViewError(
                f"{self.name} view: symbol id {first} is outside its range "
                f"{self.offset}..{self.offset + self.size - 1}"
            )
        return self._decode_local(local)

    def serialize(self, data: bytes) -> list[int]:
        """``<bos> <open> symbols <close> <eos>`` as global ids."""
        return serialize_views([(self.name, self.encode_array(data))]).tolist()


def serialize_views(parts: Sequence[tuple[str, np.ndarray]]) -> np.ndarray:
    """One document context: ``<bos>``, each encoded view wrapped in its sentinels, ``<eos>``.

    Several parts give the paired (translation) layout, e.g. ``<bos><raw>…</raw><spm>…</spm><eos>``.
    """
    pieces: list[np.ndarray] = [np.array([BOS], dtype=SYMBOL_DTYPE)]
    for name, symbols in parts:
        open_id, close_id = SENTINELS[name]
        pieces += [np.array([open_id], dtype=SYMBOL_DTYPE), symbols, np.array([close_id], dtype=SYMBOL_DTYPE)]
    pieces.append(np.array([EOS], dtype=SYMBOL_DTYPE))
    return np.concatenate(pieces)
