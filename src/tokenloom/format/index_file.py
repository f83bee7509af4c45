"""``IndexFile``: the sections of one ``.idx`` file, mapped (or parsed from its bytes)
and validated: the header against what the caller expects, the layout against the file
size, and the document index (starts at 0, ends at the sequence count, never decreases).
"""

from __future__ import annotations

import mmap
import os
from typing import Optional, Union

import numpy

from tokenloom.errors import FormatError
from tokenloom.format._mapping import map_or_read, release
from tokenloom.format.dtypes import DType
from tokenloom.format.identity import idx_digest
from tokenloom.format.spec import (
    HEADER_SIZE,
    IndexHeader,
    detect_layout,
    open_regular_file,
    unpack_header,
)

__all__ = ["IndexFile", "check_document_indices"]

Buffer = Union[bytes, "mmap.mmap", numpy.ndarray]


class IndexFile:
    """The mapped sections of one ``.idx`` file (validated on construction).

    ``multimodal=None`` detects from the file size whether sequence modes are present.
    """

    def __init__(
        self,
        idx_path: str,
        multimodal: Optional[bool],
        sequences_per_dataset: Optional[tuple[int, int]] = None,
        dtype_code: Optional[int] = None,
        check_documents: bool = True,
        data: Optional[bytes] = None,
    ) -> None:
        self.path = idx_path
        # ``data``: the whole file, already read (a small ``.idx`` read in one call)
        self.stat: Optional[os.stat_result] = None  # of the file mapped here
        buffer: Buffer
        if data is None:
            buffer, stat = _map_file(idx_path)
            self.stat, size = stat, stat.st_size
        else:
            buffer, size = data, len(data)
        header = unpack_header(bytes(buffer[:HEADER_SIZE]), idx_path)
        _check_expected_header(header, idx_path, sequences_per_dataset, dtype_code)
        layout = detect_layout(header, size, idx_path, multimodal)
        self.header = header
        self.multimodal = multimodal = layout.multimodal
        count = header.sequence_count
        self.lengths = numpy.frombuffer(buffer, numpy.int32, count, layout.lengths_offset)
        self.pointers = numpy.frombuffer(buffer, numpy.int64, count, layout.pointers_offset)
        self.documents = numpy.frombuffer(
            buffer, numpy.int64, header.document_count, layout.documents_offset
        )
        self.modes: Optional[numpy.ndarray] = (
            numpy.frombuffer(buffer, numpy.int8, count, layout.modes_offset) if multimodal else None
        )
        self._buffer: Buffer = buffer
        self._closed = False
        check_document_indices(self.documents, count, idx_path, full=check_documents)

    def digest(self) -> Optional[str]:
        """The digest of the mapped file (:func:`tokenloom.format.identity.idx_digest`),
        None when closed or built from bytes."""
        if self.stat is None or self._closed:
            return None
        return idx_digest(self.path, self.stat, memoryview(self._buffer))  # type: ignore[arg-type]

    def close(self) -> None:
        """Drop the sections and unmap (now, or once the last handed-out view dies)."""
        self.lengths = self.pointers = self.documents = None  # type: ignore[assignment]
        self.modes, self._closed = None, True
        buffer, self._buffer = self._buffer, b""
        release(buffer)


def _map_file(path: str) -> tuple[Buffer, os.stat_result]:
    with open_regular_file(path, "index") as handle:
        stat = os.fstat(handle.fileno())
        if stat.st_size < HEADER_SIZE:
            return handle.read(), stat
        return map_or_read(handle, stat.st_size), stat  # holds no descriptor once closed


def _check_expected_header(
    header: IndexHeader,
    path: str,
    sequences_per_dataset: Optional[tuple[int, int]],
    dtype_code: Optional[int],
) -> None:
    if sequences_per_dataset is not None:
        expected = (int(sequences_per_dataset[0]), int(sequences_per_dataset[1]))
        if expected != (header.sequence_count, header.document_count):
            raise FormatError(
                f"{path}: sequences_per_dataset says {expected[0]} sequences and {expected[1]} "
                f"document index entries, the header says {header.sequence_count} and "
                f"{header.document_count}; the precomputed counts are stale, rebuild them "
                "(tokenloom build-sequences-per-dataset)"
            )
    if dtype_code is not None and DType.dtype_from_code(dtype_code) is not header.dtype:
        raise FormatError(
            f"{path}: dtype_code {dtype_code} ({DType(dtype_code).name}) does not match the "
            f"header dtype {numpy.dtype(header.dtype).name}"
        )


_SMALL_DOCUMENT_INDEX = 256  # entries checked in Python: a numpy call costs more there


def check_document_indices(
    documents: numpy.ndarray, sequence_count: int, path: str, full: bool = True
) -> None:
    """FormatError unless the document index starts at 0, ends at the sequence count
    and (with ``full``) never decreases."""
    if documents.shape[0] == 0:
        raise FormatError(f"{path}: document index is empty; it must at least hold the leading 0")
    if documents[0] != 0 or documents[-1] != sequence_count:
        raise FormatError(
            f"{path}: document index must start at 0 and end at the sequence count "
            f"{sequence_count}, but runs from {int(documents[0])} to {int(documents[-1])}"
        )
    if full and 2 < documents.shape[0] <= _SMALL_DOCUMENT_INDEX:  # Python: no numpy calls
        values = documents.tolist()
        at = next((i for i, (a, b) in enumerate(zip(values, values[1:])) if a > b), None)
        if at is not None:
            raise FormatError(
                f"{path}: document index is not monotone: entry {at + 1} is "
                f"{values[at + 1]} after {values[at]}"
            )
    elif full and documents.shape[0] > 2:
        drops = numpy.flatnonzero(documents[1:] < documents[:-1])
        if drops.size:
            at = int(drops[0])
            raise FormatError(
                f"{path}: document index is not monotone: entry {at + 1} is "
                f"{int(documents[at + 1])} after {int(documents[at])}"
            )
