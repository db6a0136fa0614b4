"""Views whose symbols are bytes: the raw identity view and the zstd/brotli compressed views."""
from __future__ import annotations

import brotli
import numpy as np
import zstandard

from proxycomp.views.base import SYMBOL_DTYPE, CorruptViewError, View, ViewError

BYTE_SYMBOLS = 256


class _ByteView(View):
    def __init__(self, offset: int) -> None:
        super().__init__(offset, BYTE_SYMBOLS)

    @classmethod
    def symbols(cls, config) -> int:
        return BYTE_SYMBOLS

    def _to_symbols(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data, dtype=np.uint8).astype(SYMBOL_DTYPE) + self.offset

    @staticmethod
    def _to_bytes(local: np.ndarray) -> bytes:
        return local.astype(np.uint8).tobytes()


class RawView(_ByteView):
    """Identity: byte b is symbol ``offset + b``."""

    name = "raw"

    @classmethod
    def from_config(cls, offset: int, config, spm_model: bytes | None) -> RawView:
        return cls(offset)

    def encode_array(self, data: bytes) -> np.ndarray:
        return self._to_symbols(data)

    def _decode_local(self, local: np.ndarray) -> bytes:
        return self._to_bytes(local)


class ZstdView(_ByteView):
    """One magicless zstd frame per document: no magic number, no checksum, content size in the header.

    The compressor is created once per view: building a context per document costs more than compressing a
    small file. Views are therefore not shared between threads (each DataLoader worker builds its own).
    """

    name = "zstd"

    @classmethod
    def from_config(cls, offset: int, config, spm_model: bytes | None) -> ZstdView:
        return cls(offset, config.zstd_level)

    def __init__(self, offset: int, level: int = 3) -> None:
        super().__init__(offset)
        if not 1 <= level <= zstandard.MAX_COMPRESSION_LEVEL:
            raise ViewError(f"zstd_level must be in 1..{zstandard.MAX_COMPRESSION_LEVEL}, got {level}")
        params = zstandard.ZstdCompressionParameters.from_level(
            level, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=0, write_content_size=1, write_dict_id=0
        )
        self.level = level
        self._compressor = zstandard.ZstdCompressor(compression_params=params)
        self._decompressor = zstandard.ZstdDecompressor(format=zstandard.FORMAT_ZSTD1_MAGICLESS)

    def encode_array(self, data: bytes) -> np.ndarray:
        return self._to_symbols(self._compressor.compress(data))

    def _decode_local(self, local: np.ndarray) -> bytes:
        frame = self._to_bytes(local)
        try:
            # A one-shot decompress needs the content size that every frame we write carries; a frame
            # without it, or with bytes after it, is not ours.
            size = zstandard.frame_content_size(b"\x28\xb5\x2f\xfd" + frame)
            if size < 0:
                raise CorruptViewError("zstd view: frame header carries no content size")
            out = self._decompressor.decompressobj()
            data = out.decompress(frame)
            if not out.eof or out.unused_data or len(data) != size:
                raise CorruptViewError(f"zstd view: truncated or trailing data in a {len(frame)}-byte frame")
            return data
        except zstandard.ZstdError as err:
            raise CorruptViewError(f"zstd view: undecodable frame ({err})") from None


class BrotliView(_ByteView):
    """A raw brotli stream per document (brotli has no container; the stream is the format)."""

    name = "brotli"

    @classmethod
    def from_config(cls, offset: int, config, spm_model: bytes | None) -> BrotliView:
        return cls(offset, config.brotli_quality)

    def __init__(self, offset: int, quality: int = 5) -> None:
        super().__init__(offset)
        if not 0 <= quality <= 11:
            raise ViewError(f"brotli_quality must be in 0..11, got {quality}")
        self.quality = quality

    def encode_array(self, data: bytes) -> np.ndarray:
        return self._to_symbols(brotli.compress(data, quality=self.quality))

    def _decode_local(self, local: np.ndarray) -> bytes:
        try:
            return brotli.decompress(self._to_bytes(local))
        except brotli.error as err:
            raise CorruptViewError(f"brotli view: undecodable stream ({err})") from None
