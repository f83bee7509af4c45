"""``IndexView``: an ``.idx`` as megatron-core's ``_IndexReader`` presents it.

``IndexedDataset.index`` returns one over the dataset's mapped index, and the compat
layer's ``_IndexReader(idx_path, multimodal)`` opens one from a path. The arrays are the
read-only mapped sections; nothing is copied.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

from tokenloom.errors import FormatError
from tokenloom.format.index_file import IndexFile

__all__ = ["IndexView"]


class IndexView:
    """``sequence_lengths``, ``sequence_pointers``, ``document_indices``,
    ``sequence_modes``, ``dtype``, ``dtype_size``, ``len()`` and
    ``view[i] -> (pointer, length, mode or None)`` of one ``.idx``."""

    def __init__(self, index: IndexFile) -> None:
        self.index_file = index
        self.idx_path = index.path
        self.dtype = index.header.dtype
        self.dtype_size = numpy.dtype(self.dtype).itemsize
        self.sequence_count = int(index.header.sequence_count)
        self.document_count = int(index.header.document_count)

    def _live(self) -> IndexFile:
        if self.index_file.lengths is None:
            raise FormatError(f"{self.idx_path}: the index was closed")
        return self.index_file

    @property
    def sequence_lengths(self) -> numpy.ndarray:
        """int32 tokens of each sequence."""
        return self._live().lengths

    @property
    def sequence_pointers(self) -> numpy.ndarray:
        """int64 byte offset of each sequence in the ``.bin``."""
        return self._live().pointers

    @property
    def document_indices(self) -> numpy.ndarray:
        """int64 sequence index where each document starts (leading 0, last = count)."""
        return self._live().documents

    @property
    def sequence_modes(self) -> Optional[numpy.ndarray]:
        """int8 mode of each sequence (multimodal), else None."""
        return self._live().modes

    def __len__(self) -> int:
        return self.sequence_count

    def __getitem__(self, idx: Any) -> tuple[numpy.int64, numpy.int32, Optional[numpy.int8]]:
        """``(pointer, length, mode or None)`` of sequence ``idx``."""
        index = self._live()
        modes = index.modes
        return index.pointers[idx], index.lengths[idx], None if modes is None else modes[idx]
