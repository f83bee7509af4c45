"""Input files of ``tokenloom preprocess``: globs, decompression, line-aligned raw chunks.

Compression is recognised by the file's first bytes, not its name: gzip, zstandard
(needs the optional ``zstandard`` package, imported only for such files), bzip2, xz,
or none.  Files are read in blocks and cut after the last newline of each block, so
every :class:`RawChunk` holds whole lines and knows the number of its first line.
"""

from __future__ import annotations

import bz2
import contextlib
import glob
import gzip
import lzma
import os
from dataclasses import dataclass
from typing import IO, Iterator, List, Sequence, Tuple

from tokenloom.errors import PreprocessError

DEFAULT_CHUNK_BYTES = 1 << 20

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


def expand_inputs(patterns: Sequence[str]) -> List[str]:
    """Expand files and glob patterns (``**`` included) into a list of files, in order.

    A pattern that matches nothing, or a path that is not a file, is an error; a file
    named twice is read once.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: List[str] = []
    for pattern in map(os.fspath, patterns):
        if glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            if not matches:
                raise PreprocessError(f"--input {pattern!r} matches no files; check the pattern "
                                      "(quote it so that the shell does not expand it)")
            files.extend(matches)
        elif os.path.isdir(pattern):
            raise PreprocessError(f"--input {pattern!r} is a directory; pass its files, e.g. "
                                  f"'{os.path.join(pattern, '*.jsonl')}'")
        elif not os.path.isfile(pattern):
            raise PreprocessError(f"--input {pattern!r}: no such file")
        else:
            files.append(pattern)
    if not files:
        raise PreprocessError("no input files given; pass --input FILE_OR_GLOB")
    unique = dict.fromkeys(os.path.abspath(path) for path in files)
    return list(unique)


def detect_compression(path: str) -> str:
    """``gzip``, ``zstd``, ``bzip2``, ``xz`` or ``none``, from the file's magic bytes."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return "none"


def _zstd_reader(raw: IO[bytes], path: str) -> IO[bytes]:
    try:
        import zstandard
    except ImportError as error:
        raise PreprocessError(f"{path} is zstandard-compressed but the 'zstandard' package is not "
                              "installed: pip install 'tokenloom[compression]' (or decompress "
                              "the file first with `zstd -d`)") from error
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


@contextlib.contextmanager
def open_input(path: str) -> Iterator[Tuple[IO[bytes], IO[bytes]]]:
    """Yield ``(decompressed stream, raw file)``; the raw file's position tracks progress."""
    kind = detect_compression(path)
    with open(path, "rb") as raw:
        if kind == "gzip":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
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
    except (OSError, EOFError, lzma.LZMAError) as error:
        raise PreprocessError(f"{path}: cannot decompress ({kind}): {error}; the file is "
                              "truncated or corrupt") from error
    except Exception as error:  # zstandard.ZstdError derives from Exception only
        if type(error).__module__.startswith("zstandard"):
            raise PreprocessError(f"{path}: cannot decompress (zstd): {error}; the file is "
                                  "truncated or corrupt") from error
        raise


def iter_file_chunks(path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[RawChunk]:
    """Yield the lines of one file in chunks of about ``chunk_bytes`` (whole lines only)."""
    kind = detect_compression(path)
    line, disk_seen = 1, 0
    pending: List[bytes] = []  # the start of a line that continues in the next block
    with open_input(path) as (stream, raw):
        while True:
            block = _read(stream, max(int(chunk_bytes), 1), path, kind)
            if not block:
                break
            cut = block.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk: keep reading (linear, no re-copying)
                pending.append(block)
                continue
            data = b"".join(pending + [block[:cut]]) if pending else block[:cut]
            pending = [block[cut:]] if cut < len(block) else []
            disk_now = raw.tell()
            yield RawChunk(path, line, data, disk_now - disk_seen)
            disk_seen = disk_now
            line += data.count(b"\n")
        rest = b"".join(pending)
        disk_now = os.path.getsize(path)
        if rest or disk_now > disk_seen:
            yield RawChunk(path, line, rest, disk_now - disk_seen)


def iter_chunks(paths: Sequence[str], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[RawChunk]:
    """Chunks of every file in turn."""
    for path in paths:
        yield from iter_file_chunks(path, chunk_bytes)


def total_disk_bytes(paths: Sequence[str]) -> int:
    """Sum of the files' sizes on disk (the progress bar's total)."""
    return sum(os.path.getsize(path) for path in paths)


__all__ = ["RawChunk", "expand_inputs", "detect_compression", "open_input", "iter_file_chunks",
           "iter_chunks", "total_disk_bytes", "DEFAULT_CHUNK_BYTES"]
