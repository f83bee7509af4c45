"""The MMIDIDX ``.idx`` layout: header parsing, section offsets and serialisation.

Layout (all little endian)::

    9 bytes   magic  b"MMIDIDX\\x00\\x00"
    <Q        version (always 1)
    <B        dtype code of the tokens in the .bin (see DType)
    <Q        sequence count N
    <Q        document count D (the length of the document index, leading 0 included)
    N x int32 sequence lengths (tokens)
    N x int64 sequence pointers (byte offsets into the .bin)
    D x int64 document indices (sequence index where each document starts; 0 first, N last)
    N x int8  sequence modes (multimodal files only)
"""

from __future__ import annotations

import io
import os
import stat
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, NamedTuple, Optional, Union, overload

import numpy
import numpy.typing as npt

from tokenloom.errors import FormatError
from tokenloom.format.dtypes import DType

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
_HEADER = struct.Struct("<9sQBQQ")
HEADER_SIZE = _HEADER.size  # 34 bytes


class MissingFileError(FormatError, FileNotFoundError):
    """A ``.idx`` or ``.bin`` file that was asked for does not exist."""


@overload
def open_regular_file(path: str, what: str, buffering: Literal[0]) -> io.FileIO: ...
@overload
def open_regular_file(path: str, what: str, buffering: int = -1) -> BinaryIO: ...
def open_regular_file(path: str, what: str, buffering: int = -1) -> BinaryIO:
    """Open ``path`` for binary reading; a clear FormatError when it is missing, not a
    regular file (a directory, a FIFO that would block, a device) or unreadable."""
    try:
        # one open, checked by fstat: a FIFO swapped in after a stat would block an open
        handle = open(path, "rb", buffering=buffering, opener=_open_nonblocking)
        try:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise FormatError(
                    f"{path}: the {what} file is not a regular file; point the prefix at a "
                    "Megatron .bin/.idx pair"
                )
            os.set_blocking(handle.fileno(), True)
        except BaseException:
            handle.close()
            raise
        return handle
    except IsADirectoryError:
        raise FormatError(
            f"{path}: the {what} file is a directory; point the prefix at a Megatron .bin/.idx pair"
        ) from None
    except FileNotFoundError:
        raise MissingFileError(f"{path}: {what} file does not exist") from None
    except OSError as error:  # permissions, a symlink loop (ELOOP), a name too long, ...
        raise FormatError(
            f"{path}: cannot open the {what} file: {error.strerror or error}; "
            "check the path, its symlinks and its permissions"
        ) from None


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))


def get_idx_path(path_prefix: str) -> str:
    """Return the path of the index file of a prefix (``prefix + ".idx"``)."""
    return str(path_prefix) + ".idx"


def get_bin_path(path_prefix: str) -> str:
    """Return the path of the token file of a prefix (``prefix + ".bin"``)."""
    return str(path_prefix) + ".bin"


class IndexHeader(NamedTuple):
    """The fixed 34-byte header of an ``.idx`` file.

    ``document_count`` is the raw header field: the number of entries of the
    document index, which starts with 0, so it is the number of documents + 1.
    """

    dtype: type[numpy.number]
    sequence_count: int
    document_count: int

    @property
    def num_documents(self) -> int:
        """Number of documents (``document_count - 1``)."""
        return max(self.document_count - 1, 0)


@dataclass(frozen=True)
class IndexLayout:
    """Byte offsets of each section of an ``.idx`` file with a given header."""

    sequence_count: int
    document_count: int
    multimodal: bool

    @property
    def lengths_offset(self) -> int:
        """Offset of the int32 sequence lengths."""
        return HEADER_SIZE

    @property
    def pointers_offset(self) -> int:
        """Offset of the int64 sequence pointers."""
        return HEADER_SIZE + 4 * self.sequence_count

    @property
    def documents_offset(self) -> int:
        """Offset of the int64 document indices."""
        return self.pointers_offset + 8 * self.sequence_count

    @property
    def modes_offset(self) -> int:
        """Offset of the int8 sequence modes (meaningful when multimodal)."""
        return self.documents_offset + 8 * self.document_count

    @property
    def nbytes(self) -> int:
        """Total size of the file."""
        return self.modes_offset + (self.sequence_count if self.multimodal else 0)


def unpack_header(data: bytes, path: str) -> IndexHeader:
    """Parse and validate the fixed header from the first bytes of ``path``."""
    if len(data) < HEADER_SIZE:
        if data[: len(INDEX_MAGIC)] != INDEX_MAGIC[: len(data)]:
            _bad_magic(data, path)
        raise FormatError(
            f"{path}: truncated index file: {len(data)} bytes, the header alone needs "
            f"{HEADER_SIZE}; rebuild it (e.g. with `tokenloom preprocess`)"
        )
    magic, version, code, sequence_count, document_count = _HEADER.unpack_from(data)
    if magic != INDEX_MAGIC:
        _bad_magic(data, path)
    if version != INDEX_VERSION:
        raise FormatError(
            f"{path}: unsupported index version {version} (only version {INDEX_VERSION} exists)"
        )
    try:
        dtype = DType.dtype_from_code(code)
    except FormatError as error:
        raise FormatError(f"{path}: dtype code field: {error}") from None
    return IndexHeader(dtype, sequence_count, document_count)


def _bad_magic(data: bytes, path: str) -> None:
    raise FormatError(
        f"{path}: not an MMIDIDX index file: it starts with {bytes(data[:9])!r}, "
        f"expected {INDEX_MAGIC!r}; check that the prefix points at a Megatron .idx"
    )


def read_index_header(idx_path: str) -> IndexHeader:
    """Read only the fixed header of ``idx_path`` and validate magic, version and dtype."""
    idx_path = os.fspath(idx_path)
    with open_regular_file(idx_path, "index") as handle:
        data = handle.read(HEADER_SIZE)
    return unpack_header(data, idx_path)


def detect_layout(
    header: IndexHeader, file_size: int, path: str, multimodal: Optional[bool]
) -> IndexLayout:
    """Check ``file_size`` against the header; return the layout.

    ``multimodal=None`` detects it from the size (modes add one byte per sequence).
    A file opened as text-only that carries modes is accepted (modes ignored).
    """
    plain = IndexLayout(header.sequence_count, header.document_count, False)
    with_modes = IndexLayout(header.sequence_count, header.document_count, True)
    if multimodal is None:
        multimodal = file_size == with_modes.nbytes and with_modes.nbytes != plain.nbytes
    layout = with_modes if multimodal else plain
    if file_size < layout.nbytes:
        what = "with sequence modes " if multimodal else ""
        raise FormatError(
            f"{path}: truncated index file: {file_size} bytes, but its header "
            f"({header.sequence_count} sequences, {header.document_count} document index "
            f"entries) {what}needs {layout.nbytes} bytes"
            + ("; is the dataset really multimodal?" if multimodal else "")
        )
    if file_size != layout.nbytes and not (not multimodal and file_size == with_modes.nbytes):
        raise FormatError(
            f"{path}: index file is {file_size} bytes, expected {layout.nbytes} for "
            f"{header.sequence_count} sequences and {header.document_count} document index "
            "entries; the file is corrupt or was not written by a Megatron-compatible tool"
        )
    return layout


def sequence_pointers(
    sequence_lengths: npt.NDArray[Any], itemsize: int
) -> npt.NDArray[numpy.int64]:
    """Byte offset of each sequence when sequences are stored back to back."""
    lengths = numpy.asarray(sequence_lengths, dtype=numpy.int64)
    pointers = numpy.zeros(lengths.shape[0], dtype=numpy.int64)
    if lengths.shape[0] > 1:
        numpy.cumsum(lengths[:-1] * itemsize, out=pointers[1:])
    return pointers


def pack_index(
    dtype: npt.DTypeLike,
    sequence_lengths: npt.NDArray[Any],
    document_indices: npt.NDArray[Any],
    sequence_modes: Optional[npt.NDArray[Any]] = None,
) -> list[Union[bytes, npt.NDArray[Any]]]:
    """Return the chunks (bytes/arrays) of a complete ``.idx`` file, in order."""
    lengths = numpy.ascontiguousarray(sequence_lengths, dtype=numpy.int32)
    documents = numpy.ascontiguousarray(document_indices, dtype=numpy.int64)
    code = DType.code_from_dtype(dtype)
    header = _HEADER.pack(INDEX_MAGIC, INDEX_VERSION, code, lengths.shape[0], documents.shape[0])
    chunks: list[Union[bytes, npt.NDArray[Any]]] = [
        header,
        lengths,
        sequence_pointers(lengths, DType.size(code)),
        documents,
    ]
    if sequence_modes is not None:
        chunks.append(numpy.ascontiguousarray(sequence_modes, dtype=numpy.int8))
    return chunks


def write_index(
    handle: BinaryIO,
    dtype: npt.DTypeLike,
    sequence_lengths: npt.NDArray[Any],
    document_indices: npt.NDArray[Any],
    sequence_modes: Optional[npt.NDArray[Any]] = None,
) -> None:
    """Write a complete ``.idx`` file to an open binary ``handle``."""
    for chunk in pack_index(dtype, sequence_lengths, document_indices, sequence_modes):
        handle.write(chunk.data.cast("B") if isinstance(chunk, numpy.ndarray) else chunk)


def write_index_blocks(
    handle: BinaryIO,
    dtype: npt.DTypeLike,
    counts: tuple[int, int],
    length_blocks: Callable[[], Iterable[npt.NDArray[Any]]],
    document_blocks: Iterable[npt.NDArray[Any]],
    mode_blocks: Optional[Iterable[npt.NDArray[Any]]] = None,
) -> None:
    """Write a complete ``.idx`` from blocks, in bounded memory: the same bytes as
    :func:`write_index`.  ``counts`` is (sequences, document index entries);
    ``length_blocks()`` is called twice (lengths, then the pointers computed from them)."""
    code = DType.code_from_dtype(dtype)
    handle.write(_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, code, counts[0], counts[1]))
    for block in length_blocks():
        handle.write(numpy.ascontiguousarray(block, dtype=numpy.int32).data.cast("B"))
    itemsize, offset = DType.size(code), 0
    for block in length_blocks():
        sizes = numpy.asarray(block, dtype=numpy.int64) * itemsize
        pointers = numpy.empty(sizes.shape[0], dtype=numpy.int64)
        if sizes.shape[0]:
            pointers[0] = offset
            numpy.cumsum(sizes[:-1], out=pointers[1:])
            pointers[1:] += offset
            offset += int(sizes.sum())
        handle.write(pointers.data.cast("B"))
    for blocks, kind in ((document_blocks, numpy.int64), (mode_blocks or (), numpy.int8)):
        for block in blocks:
            handle.write(numpy.ascontiguousarray(block, dtype=kind).data.cast("B"))


__all__ = [
    "INDEX_MAGIC",
    "INDEX_VERSION",
    "HEADER_SIZE",
    "MissingFileError",
    "open_regular_file",
    "IndexHeader",
    "IndexLayout",
    "get_idx_path",
    "get_bin_path",
    "unpack_header",
    "read_index_header",
    "detect_layout",
    "sequence_pointers",
    "pack_index",
    "write_index",
    "write_index_blocks",
]
