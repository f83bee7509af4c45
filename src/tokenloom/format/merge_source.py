"""A pair appended to another by :meth:`IndexedDatasetBuilder.add_index` (``tokenloom
merge``): the checks that it can be appended byte for byte, and the copy of its ``.bin``.

* :class:`MergeSource`: its ``.idx``, read in bounded blocks, and the checks that it has
  the builder's dtype and modality, sequences back to back, a valid document index and
  a ``.bin`` of exactly the size its ``.idx`` describes;
* :func:`copy_bin`: the ``.bin``'s bytes through one fixed buffer, reporting progress.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy
import numpy.typing as npt

from tokenloom.errors import FormatError
from tokenloom.format.spec import (
    HEADER_SIZE,
    MissingFileError,
    detect_layout,
    get_bin_path,
    get_idx_path,
    open_regular_file,
    sequence_pointers,
    unpack_header,
)

__all__ = ["MergeSource", "copy_bin"]

_COPY_CHUNK = 1 << 20  # one buffer, reused: the merge's memory does not grow with the parts
_BLOCK_ITEMS = 1 << 16


class MergeSource:
    """The ``.idx`` of a pair to append, read in blocks of ``_BLOCK_ITEMS`` entries with
    ``pread`` (not mapped: the mapped pages of a large index would count in the merging
    process's resident memory).  Use as a context manager."""

    def __init__(self, path_prefix: str) -> None:
        self.path = get_idx_path(path_prefix)
        self.bin_path = get_bin_path(path_prefix)
        self._handle = open_regular_file(self.path, "index")
        try:
            size = os.fstat(self._handle.fileno()).st_size
            self.header = unpack_header(self._handle.read(HEADER_SIZE), self.path)
            self.layout = detect_layout(self.header, size, self.path, None)
        except BaseException:
            self._handle.close()
            raise

    def _blocks(self, offset: int, count: int, dtype: Any) -> Iterator[npt.NDArray[Any]]:
        item = numpy.dtype(dtype).itemsize
        for start in range(0, count, _BLOCK_ITEMS):
            take = min(_BLOCK_ITEMS, count - start)
            data = os.pread(self._handle.fileno(), take * item, offset + start * item)
            if len(data) != take * item:
                raise FormatError(f"{self.path}: the index file shrank while it was being merged")
            yield numpy.frombuffer(data, dtype=dtype)

    def lengths(self) -> Iterator[npt.NDArray[numpy.int32]]:
        """The sequence lengths, in blocks."""
        return self._blocks(self.layout.lengths_offset, self.header.sequence_count, numpy.int32)

    def documents(self) -> Iterator[npt.NDArray[numpy.int64]]:
        """The document index (leading 0 included), in blocks."""
        return self._blocks(self.layout.documents_offset, self.header.document_count, numpy.int64)

    def modes(self) -> Iterator[npt.NDArray[numpy.int8]]:
        """The sequence modes (none when the index has none), in blocks."""
        if not self.layout.multimodal:
            return iter(())
        return self._blocks(self.layout.modes_offset, self.header.sequence_count, numpy.int8)

    def check(self, dtype: npt.DTypeLike, multimodal: bool) -> int:
        """The ``.bin`` size in bytes, after checking that a builder of ``dtype`` and
        ``multimodal`` can append the pair; FormatError (MissingFileError) naming the file
        and the difference otherwise."""
        theirs, ours = numpy.dtype(self.header.dtype), numpy.dtype(dtype)
        if theirs != ours:
            raise FormatError(
                f"{self.path}: cannot merge: its tokens are {theirs.name}, "
                f"the builder writes {ours.name}"
            )
        if self.header.sequence_count and self.layout.multimodal != multimodal:
            kind = "multimodal" if self.layout.multimodal else "not multimodal"
            raise FormatError(
                f"{self.path}: cannot merge: the dataset is {kind} but the builder "
                f"has multimodal={multimodal}"
            )
        nbytes = self._check_pointers(theirs.itemsize)
        self._check_documents()
        try:
            size = os.path.getsize(self.bin_path)
        except FileNotFoundError:
            raise MissingFileError(f"{self.bin_path}: data file does not exist") from None
        if size != nbytes:
            raise FormatError(
                f"{self.bin_path}: cannot merge: data file is {size} bytes, its index "
                f"describes {nbytes}"
            )
        return nbytes

    def _check_pointers(self, itemsize: int) -> int:
        count, offset = self.header.sequence_count, 0
        pointers = self._blocks(self.layout.pointers_offset, count, numpy.int64)
        for lengths, stored in zip(self.lengths(), pointers):
            expected = sequence_pointers(lengths, itemsize) + offset
            if not numpy.array_equal(expected, stored):
                raise FormatError(
                    f"{self.path}: cannot merge: sequence pointers are not contiguous"
                )
            offset += int(lengths.sum(dtype=numpy.int64)) * itemsize
        return offset

    def _check_documents(self) -> None:
        """The rules of :func:`~tokenloom.format.index_file.check_document_indices`, by block."""
        count, entries = self.header.sequence_count, self.header.document_count
        if entries == 0:
            raise FormatError(
                f"{self.path}: document index is empty; it must at least hold the leading 0"
            )
        ends = [
            next(self._blocks(self.layout.documents_offset + 8 * at, 1, numpy.int64))[0]
            for at in (0, entries - 1)
        ]
        if ends[0] != 0 or ends[1] != count:
            raise FormatError(
                f"{self.path}: document index must start at 0 and end at the sequence count "
                f"{count}, but runs from {int(ends[0])} to {int(ends[1])}"
            )
        start, previous = 0, numpy.zeros(0, dtype=numpy.int64)  # start: index of joined[0]
        for block in self.documents():
            joined = numpy.concatenate((previous, block))
            drops = numpy.flatnonzero(joined[1:] < joined[:-1])
            if drops.size:
                at = int(drops[0])
                raise FormatError(
                    f"{self.path}: document index is not monotone: entry {start + at + 1} is "
                    f"{int(joined[at + 1])} after {int(joined[at])}"
                )
            start, previous = start + joined.shape[0] - 1, block[-1:]

    def __enter__(self) -> MergeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def copy_bin(
    bin_path: str,
    nbytes: int,
    write: Callable[[memoryview], None],
    progress: Optional[Callable[[int], None]],
) -> None:
    """Hand the first ``nbytes`` of ``bin_path`` to ``write`` chunk by chunk (and each
    chunk's size to ``progress``); FormatError when the file shrank meanwhile.

    The chunks are views of one buffer of ``_COPY_CHUNK`` bytes, whatever the file's
    size (``write`` must not keep them).  Reading ``min(16 MiB, what is left)`` at a
    time, as before, allocated a chunk as large as the part up to 16 MiB (which the heap
    then kept once glibc's mmap threshold had risen): a merge's peak grew with the data."""
    view = memoryview(bytearray(_COPY_CHUNK))
    with open(bin_path, "rb", buffering=0) as source:
        left = nbytes
        while left:
            got = source.readinto(view[: min(_COPY_CHUNK, left)])
            if not got:
                raise FormatError(f"{bin_path}: data file shrank while it was being merged")
            write(view[:got])
            left -= got
            if progress is not None:
                progress(got)
