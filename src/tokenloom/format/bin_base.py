"""The interface of every ``.bin`` reader, and what the local readers share: opening
the file, and reopening it only when it is still the file first opened."""

from __future__ import annotations

import io
import os
from abc import ABC, abstractmethod
from typing import Any, Optional

import numpy.typing as npt

from tokenloom.errors import FormatError
from tokenloom.format.spec import open_regular_file

__all__ = [
    "GUARDED_TAIL",
    "MAX_OFFSET",
    "BinReader",
    "open_data_file",
    "reopen_same",
    "short_read",
    "stat_identity",
]

MAX_OFFSET = (1 << 63) - 1  # beyond this seek() fails with EINVAL (retrying cannot help)
GUARDED_TAIL = 1 << 16  # reads ending in the last 64 KiB of a mapping re-check its size


class BinReader(ABC):
    """Reads tokens out of one ``.bin`` file by byte offset."""

    path: str
    #: reads that end beyond this byte call :meth:`verify_size` first (only memory maps
    #: guard their tail; the others never need to)
    guard_from: int = MAX_OFFSET

    def verify_size(self) -> None:
        """FormatError naming the file when reading it further could crash the process
        (a mapped file that shrank); a no-op for readers that cannot crash."""
        return None

    @abstractmethod
    def read(self, dtype: npt.DTypeLike, count: int, offset: int) -> npt.NDArray[Any]:
        """Return ``count`` items of ``dtype`` starting at byte ``offset``.

        Raises FormatError when the file holds fewer bytes than asked for.
        """

    @property
    def size(self) -> Optional[int]:
        """Size of the file in bytes, or None when unknown without a round trip."""
        return None

    def tokens(self, dtype: npt.DTypeLike) -> Optional[npt.NDArray[Any]]:
        """1-D read-only view of the whole file, or None when the reader has no such view."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook: most readers hold nothing to release
        """Release resources; arrays already handed out stay valid."""


def short_read(path: str, count: int, offset: int, itemsize: int, got_bytes: int) -> FormatError:
    """The FormatError for a read of ``count`` tokens at ``offset`` that got only ``got_bytes``."""
    return FormatError(
        f"{path}: data file too short: reading {count} tokens ({count * itemsize} bytes) at byte "
        f"offset {offset} returned only {got_bytes} bytes; the .bin is truncated or does not "
        "belong to this .idx"
    )


def open_data_file(path: str) -> io.FileIO:
    """``path`` opened unbuffered for reading, refused unless a regular file."""
    return open_regular_file(path, "data", buffering=0)


def stat_identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """``(device, inode, size, mtime_ns)`` of ``stat``: what identifies an open ``.bin``."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def reopen_same(path: str, known: tuple[int, int, int, int]) -> io.FileIO:
    """``path`` opened again; FormatError naming it when it is no longer the file first
    opened (replaced, rewritten or resized: reading it would mix two files)."""
    handle = open_data_file(path)
    now = stat_identity(os.fstat(handle.fileno()))
    if now != known:
        handle.close()
        raise FormatError(
            f"{path}: the data file changed since it was first opened (device, inode, size, "
            f"mtime_ns were {known}, now {now}); it was reopened after its mapping or "
            "descriptor was closed to bound open .bin files (max_open_bin_files, "
            "docs/reliability.md), and another file must not be read under the old index. "
            "Rebuild the datasets over the new files, or publish new data under a new prefix"
        )
    return handle
