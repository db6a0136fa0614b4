"""The shared symbol vocabulary: one id space for every view, as in the paper's code.

    0..63     specials: pad, bos, eos, then an open/close sentinel pair per view, then spares
    64..319   raw bytes (byte b has id b + 64)
    320..     one contiguous range per compressed view, in the order the run enables them

A view of a document is serialized as ``<bos> <open> symbols <close> <eos>``; inference always
starts with ``<bos><raw>``. Compressed bytes get ranges of their own: a zstd byte 0x41 is not the
raw byte "A".
"""
from __future__ import annotations

from dataclasses import dataclass

from proxycomp.errors import UserError

PAD, BOS, EOS = 0, 1, 2
NUM_SPECIALS = 64
RAW_OFFSET = NUM_SPECIALS
RAW_SIZE = 256
# Sentinel ids are fixed per view name, whatever the run enables, so a checkpoint's prompts never move.
SENTINELS: dict[str, tuple[int, int]] = {"raw": (3, 4), "spm": (5, 6), "zstd": (7, 8), "brotli": (9, 10)}
VIEW_NAMES = tuple(SENTINELS)


class VocabularyError(UserError):
    pass


@dataclass(frozen=True)
class Vocabulary:
    """Id layout for one run: `compressed` lists (view name, number of symbols) in range order."""

    compressed: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        names = [name for name, _ in self.compressed]
        for name, size in self.compressed:
            if name not in SENTINELS or name == "raw":
                raise VocabularyError(f"unknown compressed view {name!r}; known: {', '.join(VIEW_NAMES[1:])}")
            if size <= 0:
                raise VocabularyError(f"view {name!r} needs a positive symbol count, got {size}")
        if len(set(names)) != len(names):
            raise VocabularyError(f"a view is listed twice: {names}")

    @property
    def size(self) -> int:
        return RAW_OFFSET + RAW_SIZE + sum(size for _, size in self.compressed)

    def offset(self, view: str) -> int:
        """First id of `view`'s range."""
        if view == "raw":
            return RAW_OFFSET
        start = RAW_OFFSET + RAW_SIZE
        for name, size in self.compressed:
            if name == view:
                return start
            start += size
        raise VocabularyError(f"view {view!r} is not in this vocabulary "
                              f"(has raw, {', '.join(self.views[1:]) or 'nothing else'})")

    def range(self, view: str) -> range:
        start = self.offset(view)
        size = RAW_SIZE if view == "raw" else dict(self.compressed)[view]
        return range(start, start + size)

    @property
    def views(self) -> tuple[str, ...]:
        return ("raw",) + tuple(name for name, _ in self.compressed)

    @staticmethod
    def sentinels(view: str) -> tuple[int, int]:
        if view not in SENTINELS:
            raise VocabularyError(f"unknown view {view!r}; known: {', '.join(VIEW_NAMES)}")
        return SENTINELS[view]

    def to_dict(self) -> dict:
        return {"compressed": [[name, size] for name, size in self.compressed]}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocabulary":
        return cls(tuple((str(name), int(size)) for name, size in d.get("compressed", [])))


def is_raw_byte(ids):
    """Mask of raw-byte ids (works on ints, numpy arrays and torch tensors)."""
    return (ids >= RAW_OFFSET) & (ids < RAW_OFFSET + RAW_SIZE)


def raw_prompt(text: bytes) -> list[int]:
    """The ids of a raw-byte prompt: ``<bos><raw>`` then the bytes."""
    return [BOS, SENTINELS["raw"][0]] + [b + RAW_OFFSET for b in text]


RAW_PROMPT_OPENING = len(raw_prompt(b""))  # symbols a raw-byte prompt takes besides its bytes


def raw_reply_ids(vocab_size: int) -> list[int]:
    """The symbols a raw-byte continuation may hold: raw bytes and its two stops (EOS, ``</raw>``).

    A proxy model also assigns some probability to compressed-view ids; after ``<raw>`` they are not text, so
    raw-byte inference samples from the distribution restricted (renormalized) to these ids."""
    return sorted(set(range(RAW_OFFSET, min(RAW_OFFSET + RAW_SIZE, vocab_size))) | {EOS, SENTINELS["raw"][1]})
