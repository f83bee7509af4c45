"""The built-in byte tokenizer: one id per UTF-8 byte (0..255) plus an end-of-document id 256.

It needs no files and no libraries, never fails on any text, and decodes exactly
back to the input.  Useful for tests, smoke runs and byte-level models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers.base import ID_DTYPE, BaseTokenizer

EOD_TEXT = "<|endoftext|>"


class ByteTokenizer(BaseTokenizer):
    """Bytes 0..255 are ids 0..255; ``eod`` is 256; ``vocab_size`` is 257; no pad token."""

    def __init__(self) -> None:
        self.vocab_size = 257
        self.eod = 256
        self.pad = None
        self._finish_init({}, {"class": type(self).__name__, "encoding": "utf-8 bytes"})

    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]

    def _encode_native(self, texts: list[str]) -> list[bytes]:
        return [text.encode("utf-8") for text in texts]

    def _flat_from_native(self, native: list[bytes]) -> tuple[numpy.ndarray, numpy.ndarray]:
        """All texts' UTF-8 bytes as one int32 array, and the byte length of each text."""
        lengths = numpy.fromiter(map(len, native), dtype=numpy.int64, count=len(native))
        flat = numpy.frombuffer(b"".join(native), dtype=numpy.uint8).astype(ID_DTYPE)
        return flat, lengths

    def decode(self, ids) -> str:
        """UTF-8 text of the byte ids; each eod id becomes ``<|endoftext|>``.

        Invalid UTF-8 (e.g. a document cut mid-character) decodes with U+FFFD.
        """
        array = numpy.asarray(ids).reshape(-1)
        if array.size and (array.min() < 0 or array.max() > self.eod):
            bad = array[(array < 0) | (array > self.eod)][0]
            raise TokenizerError(f"byte tokenizer: id {int(bad)} is outside 0..{self.eod}")
        pieces, start = [], 0
        for at in numpy.flatnonzero(array == self.eod).tolist() + [array.shape[0]]:
            pieces.append(array[start:at].astype(numpy.uint8).tobytes().decode("utf-8", "replace"))
            start = at + 1
        return EOD_TEXT.join(pieces)


__all__ = ["ByteTokenizer", "EOD_TEXT"]
