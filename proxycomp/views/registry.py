"""Views by name: the vocabulary layout for a list of view names, and the codecs built on it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxycomp.defaults import SPM_VOCAB_SIZE
from proxycomp.views.base import View, ViewError
from proxycomp.views.byte_codecs import BrotliView, RawView, ZstdView
from proxycomp.views.spm import SpmView
from proxycomp.vocab import Vocabulary

VIEW_CLASSES: dict[str, type[View]] = {cls.name: cls for cls in (RawView, SpmView, ZstdView, BrotliView)}


def check_view_names(names: Sequence[str]) -> None:
    """Raise on an unknown or repeated name, or a list without `raw` (evaluation always reads raw bytes)."""
    for name in names:
        if name not in VIEW_CLASSES:
            raise ViewError(f"unknown view {name!r}; known views: {', '.join(VIEW_CLASSES)}")
    if len(set(names)) != len(names):
        raise ViewError(f"views lists a name twice: {list(names)}")
    if "raw" not in names:
        raise ViewError(f"views must include 'raw' (evaluation reads raw bytes), got {list(names)}")


@dataclass(frozen=True)
class ViewConfig:
    """The views a run trains on: everything needed to rebuild them anywhere (a DataLoader worker, a restored
    checkpoint).

    Args:
        names: raw plus the compressed views, in vocabulary order: spm, zstd, brotli
        spm_vocab_size: SentencePiece pieces
        spm_train_bytes: the SentencePiece model trains on a seeded sample of this many train bytes
        spm_model_file: a SentencePiece .model to use instead of training one (runs that must share a tokenizer)
        zstd_level: zstd compression level
        brotli_quality: brotli quality
    """

    names: tuple[str, ...] = ("raw", "spm")
    spm_vocab_size: int = SPM_VOCAB_SIZE
    spm_train_bytes: int = 20_000_000
    spm_model_file: str | None = None
    zstd_level: int = 3
    brotli_quality: int = 5

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))  # YAML gives a list
        check_view_names(self.names)

    def vocabulary(self) -> Vocabulary:
        """Compressed ranges follow the order of `names` (raw bytes have their fixed range)."""
        return Vocabulary(tuple((name, VIEW_CLASSES[name].symbols(self)) for name in self.names if name != "raw"))

    def build(self, spm_model: bytes | None = None) -> dict[str, View]:
        """The codecs, keyed by name; `spm_model` (a serialized SentencePiece model) is needed for `spm`."""
        vocab = self.vocabulary()
        return {name: VIEW_CLASSES[name].from_config(vocab.offset(name), self, spm_model) for name in self.names}
