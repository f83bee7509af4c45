"""Input files of ``tokenloom preprocess``: globs, decompression, line-aligned raw chunks.

Compression is recognised by the file's first bytes, not its name: gzip, zstandard
(needs the optional ``zstandard`` package, imported only for such files), bzip2, xz,
or none.  Files are read in blocks and cut after the last newline of each block, so
every :class:`RawChunk` holds whole lines and knows the number of its first line.
An input may also be an object in object storage (``s3://``, ``msc://``), read the
same way (:mod:`tokenloom.preprocess.remote_inputs`).
"""

from __future__ import annotations

import bz2
import contextlib
import glob
import gzip
import lzma
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Optional

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.remote_inputs import (
    check_remote_input,
    is_remote_input,
    open_remote_input,
    remote_input_size,
)

DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_MAX_LINE_BYTES = 1 << 30

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)


@dataclass(frozen=True)
class RawChunk:
    """Whole lines of one input file.

    Attributes:
        path: the input file.
        first_line: 1-based line number of the first line in ``data``.
        data: the (decompressed) bytes of the lines, newlines included.
        disk_bytes: bytes of the file on disk consumed to produce this chunk.
    """

    path: str
    first_line: int
    data: bytes
    disk_bytes: int


def expand_inputs(patterns: Sequence[str]) -> list[str]:
    """Expand files and glob patterns (``**`` included) into a list of files, in order.

    A pattern that matches nothing, or a path that is not a file, is an error; a file
    named twice is read once.  ``s3://`` and ``msc://`` objects are kept as named (one
    object each: no globs there).
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: list[str] = []
    for pattern in map(os.fspath, patterns):
        if is_remote_input(pattern):
            files.append(check_remote_input(pattern))
        elif glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            if not matches:
                raise PreprocessError(
                    f"--input {pattern!r} matches no files; check the pattern "
                    "(quote it so that the shell does not expand it)"
                )
            files.extend(matches)
        elif os.path.isdir(pattern):
            raise PreprocessError(
                f"--input {pattern!r} is a directory; pass its files, e.g. "
                f"'{os.path.join(pattern, '*.jsonl')}'"
            )
        elif not os.path.isfile(pattern):
            raise PreprocessError(f"--input {pattern!r}: no such file")
        else:
            files.append(pattern)
    if not files:
        raise PreprocessError("no input files given; pass --input FILE_OR_GLOB")
    unique = dict.fromkeys(
        path if is_remote_input(path) else os.path.abspath(path) for path in files
    )
    return list(unique)


def open_binary(path: str, buffered: bool = True) -> IO[bytes]:
    """The input at ``path`` opened for binary reading: a local file, or an object in
    object storage (buffered for a sequential read, else one request per read)."""
    if is_remote_input(path):
        return open_remote_input(path, buffered)
    return open(path, "rb")


def input_size(path: str) -> Optional[int]:
    """Bytes of the input on disk, or of the object (None when its store tells none)."""
    if is_remote_input(path):
        return remote_input_size(path)
    return os.path.getsize(path)


def detect_compression(path: str) -> str:
    """``gzip``, ``zstd``, ``bzip2``, ``xz`` or ``none``, from the file's magic bytes."""
    with open_binary(path, buffered=False) as handle:
        head = handle.read(8)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return "none"


class _ZstdReader:
    """Decompresses every zstandard frame of ``raw`` in turn; a file that ends inside a
    frame is an error (zstandard's own stream reader returns short data silently)."""

    def __init__(self, zstandard, raw: IO[bytes], path: str) -> None:
        self._raw, self._path = raw, path
        self._context = zstandard.ZstdDecompressor()
        self._frame = self._context.decompressobj()
        self._buffer = bytearray()
        self._in_frame = False
        self._eof = False

    def _feed(self, block: bytes) -> None:
        while block:
            self._in_frame = True
            self._buffer += self._frame.decompress(block)
            if not self._frame.eof:
                return
            block = self._frame.unused_data
            self._frame = self._context.decompressobj()
            self._in_frame = False

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and not self._eof:
            block = self._raw.read(1 << 20)
            if not block:
                self._eof = True
                if self._in_frame:
                    raise PreprocessError(
                        f"{self._path}: the zstd file is truncated (it ends "
                        "inside a compressed frame); re-copy or re-compress "
                        "it"
                    )
                break
            self._feed(block)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out

    def close(self) -> None:
        self._buffer = bytearray()


def _zstd_reader(raw: IO[bytes], path: str) -> IO[bytes]:
    try:
        import zstandard
    except ImportError as error:
        raise PreprocessError(
            f"{path} is zstandard-compressed but the 'zstandard' package is not "
            "installed: pip install 'tokenloom[compression]' (or decompress "
            "the file first with `zstd -d`)"
        ) from error
    return _ZstdReader(zstandard, raw, path)  # type: ignore[return-value]


@contextlib.contextmanager
def open_input(path: str) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Yield ``(decompressed stream, raw file)``; the raw file's position tracks progress."""
    kind = detect_compression(path)
    with open_binary(path) as raw:
        stream: IO[bytes]
        if kind == "gzip":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        elif kind == "zstd":
            stream = _zstd_reader(raw, path)
        elif kind == "bzip2":
            stream = bz2.BZ2File(raw, mode="rb")
        elif kind == "xz":
            stream = lzma.LZMAFile(raw, mode="rb")
        else:
            stream = raw
        try:
            yield stream, raw
        finally:
            if stream is not raw:
                stream.close()


def _read(stream: IO[bytes], size: int, path: str, kind: str) -> bytes:
    try:
        return stream.read(size)
    except EOFError as error:
        raise PreprocessError(
            f"{path}: the {kind} file is truncated ({error}); re-copy or re-compress it"
        ) from error
    except (OSError, lzma.LZMAError) as error:
        raise PreprocessError(
            f"{path}: cannot decompress ({kind}): {error}; the file is truncated or corrupt"
        ) from error
    except Exception as error:  # zstandard.ZstdError derives from Exception only
        if type(error).__module__.startswith("zstandard"):
            raise PreprocessError(
                f"{path}: cannot decompress (zstd): {error}; the file is truncated or corrupt"
            ) from error
        raise


def max_line_bytes() -> int:
    """The longest input line read (``TOKENLOOM_MAX_LINE_BYTES``, default 1 GiB): a line
    is held in memory whole, so a compressed file whose one line never ends (a gzip bomb:
    13 MB on disk for 3 GiB) must not grow without bound."""
    text = os.environ.get("TOKENLOOM_MAX_LINE_BYTES", "")
    try:
        value = int(text) if text.strip() else DEFAULT_MAX_LINE_BYTES
    except ValueError:
        value = 0
    if not 1 <= value <= 1 << 40:
        raise PreprocessError(
            f"TOKENLOOM_MAX_LINE_BYTES={text!r}: give a number of bytes from 1 to 2**40"
        )
    return value


def _too_long(path: str, line: int, limit: int) -> PreprocessError:
    return PreprocessError(
        f"{path}:{line}: the line is longer than {limit} bytes (no newline within "
        f"{limit} bytes, decompressed); split the record, or raise TOKENLOOM_MAX_LINE_BYTES "
        "if it is genuine (the whole line is held in memory)"
    )


def iter_file_chunks(path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[RawChunk]:
    """Yield the lines of one file in chunks of about ``chunk_bytes`` (whole lines only);
    PreprocessError naming the line when one is longer than :func:`max_line_bytes`."""
    kind, limit = detect_compression(path), max_line_bytes()
    line, disk_seen, held = 1, 0, 0
    pending: list[bytes] = []  # the start of a line that continues in the next block
    with open_input(path) as (stream, raw):
        while True:
            block = _read(stream, max(int(chunk_bytes), 1), path, kind)
            if not block:
                break
            cut = block.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk: keep reading (linear, no re-copying)
                pending.append(block)
                held += len(block)
                if held > limit:
                    raise _too_long(path, line, limit)
                continue
            if held + block.find(b"\n") > limit:
                raise _too_long(path, line, limit)
            data = b"".join(pending + [block[:cut]]) if pending else block[:cut]
            pending = [block[cut:]] if cut < len(block) else []
            held = len(block) - cut
            disk_now = raw.tell()
            yield RawChunk(path, line, data, disk_now - disk_seen)
            disk_seen = disk_now
            line += data.count(b"\n")
        rest = b"".join(pending)
        disk_now = input_size(path) or disk_seen
        if rest or disk_now > disk_seen:
            yield RawChunk(path, line, rest, disk_now - disk_seen)


def _range_start(handle: IO[bytes], start: int) -> tuple[int, int]:
    """(first byte of the first line starting at or after ``start``, its 1-based line number)."""
    position = 0
    if start > 0:
        handle.seek(start - 1)
        if handle.read(1) != b"\n":  # skip the rest of a line that began before start
            while True:  # in bounded pieces: the line may be longer than memory
                piece = handle.readline(1 << 20)
                if not piece or piece.endswith(b"\n"):
                    break
        position = handle.tell()
    handle.seek(0)
    newlines, left = 0, position
    while left:
        block = handle.read(min(left, 16 << 20))
        newlines += block.count(b"\n")
        left -= len(block)
    return position, newlines + 1


def iter_file_range_chunks(
    path: str, start: int, stop: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[RawChunk]:
    """Chunks of the lines of plain file ``path`` that start in ``[start, stop)``."""
    if detect_compression(path) != "none":
        raise PreprocessError(
            f"{path}: byte ranges need an uncompressed file (this one is "
            f"{detect_compression(path)}); pass the whole file instead"
        )
    if not 0 <= int(start) <= int(stop):
        raise PreprocessError(f"{path}: bad byte range [{start}, {stop})")
    limit = max_line_bytes()
    with open_binary(path) as handle:
        position, line = _range_start(handle, int(start))
        handle.seek(position)
        while position < int(stop):
            data = handle.read(max(min(int(chunk_bytes), int(stop) - position), 1))
            if not data:
                break
            if not data.endswith(b"\n"):  # finish the line that starts inside the range
                start = data.rfind(b"\n") + 1
                rest = handle.readline(limit + 1 - (len(data) - start))
                if len(data) - start + len(rest) > limit:
                    raise _too_long(path, line + data.count(b"\n"), limit)
                data += rest
            yield RawChunk(path, line, data, len(data))
            position += len(data)
            line += data.count(b"\n")


def iter_chunks(paths: Sequence[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[RawChunk]:
    """Chunks of every file in turn."""
    for path in paths:
        yield from iter_file_chunks(path, chunk_bytes)


def total_disk_bytes(paths: Sequence[str]) -> int:
    """Sum of the files' sizes on disk (the progress bar's total; an object of unknown
    size counts 0)."""
    return sum(input_size(path) or 0 for path in paths)


__all__ = [
    "RawChunk",
    "expand_inputs",
    "detect_compression",
    "open_input",
    "open_binary",
    "input_size",
    "iter_file_chunks",
    "iter_file_range_chunks",
    "iter_chunks",
    "total_disk_bytes",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "max_line_bytes",
]
