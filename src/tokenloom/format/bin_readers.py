"""Readers of a local ``.bin`` token file: memory map and file pointer.

Every reader implements :class:`BinReader`.  :func:`make_bin_reader` picks one for a
local file from the ``IndexedDataset`` arguments.  ``s3://`` and ``msc://`` pairs take
one other path, :mod:`tokenloom.format.remote`, whose reader
(:class:`tokenloom.storage.ObjectBinReader`) implements the same interface.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Optional, Union

import numpy
import numpy.typing as npt

from tokenloom.errors import ConfigError, FormatError
from tokenloom.format._mapping import LIVE_MAPPINGS, Buffer, map_readonly, release
from tokenloom.format.spec import MissingFileError, open_regular_file

logger = logging.getLogger(__name__)

_MAX_OFFSET = (1 << 63) - 1  # beyond this seek() fails with EINVAL (retrying cannot help)
_GUARDED_TAIL = 1 << 16  # reads ending in the last 64 KiB of a mapping re-check its size


class BinReader(ABC):
    """Reads tokens out of one ``.bin`` file by byte offset."""

    path: str
    #: reads that end beyond this byte call :meth:`verify_size` first (only memory maps
    #: guard their tail; the others never need to)
    guard_from: int = _MAX_OFFSET

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


def _short_read(path: str, count: int, offset: int, itemsize: int, got_bytes: int) -> FormatError:
    return FormatError(
        f"{path}: data file too short: reading {count} tokens ({count * itemsize} bytes) at byte "
        f"offset {offset} returned only {got_bytes} bytes; the .bin is truncated or does not "
        "belong to this .idx"
    )


def _open_existing(path: str) -> io.FileIO:
    return open_regular_file(path, "data", buffering=0)


class MMapBinReader(BinReader):
    """Memory-maps the ``.bin`` file once; reads are zero-copy views.

    Views keep the mapping alive: ``close()`` only drops this reader's reference,
    the memory is unmapped when the last view is garbage collected.
    """

    _buffer: Union[Buffer, bytes]

    def __init__(self, bin_path: str) -> None:
        self.path = bin_path
        self.failure: Optional[FormatError] = None
        with _open_existing(bin_path) as handle:
            stat = os.fstat(handle.fileno())
            self._size, self._file = stat.st_size, (stat.st_dev, stat.st_ino)
            if self._size:
                self._buffer = map_readonly(handle, self._size)  # no descriptor kept
            else:
                self._buffer = b""
        self.guard_from = max(0, self._size - _GUARDED_TAIL)
        LIVE_MAPPINGS.add(self)

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        return self._size

    def verify_size(self) -> None:
        """FormatError naming the file when the mapped file shrank (one ``stat``).

        Only the mapped inode matters: a file replaced by rename (tokenloom's publish) or
        deleted leaves the mapping intact and readable, only one truncated in place does
        not (reads past its new end would raise SIGBUS and kill the process)."""
        if self.failure is None and self._size:
            try:
                stat = os.stat(self.path)
            except OSError:
                return  # gone from its path: the mapped inode lives on, whole
            if (stat.st_dev, stat.st_ino) == self._file and stat.st_size < self._size:
                self.failure = _shrunk(self.path, self._size, stat.st_size)
                self.guard_from = -1  # every later read raises at once
        if self.failure is not None:
            raise FormatError(*self.failure.args)  # a fresh one: no traceback piles up

    def recheck_after_fork(self) -> None:
        """In a new child process: check the size now, and log an error naming the file
        when it shrank (reads of tokenloom's own paths then raise ``failure``)."""
        try:
            self.verify_size()
        except FormatError as error:
            logger.error("%s", error)

    def read(self, dtype: npt.DTypeLike, count: int, offset: int) -> npt.NDArray[Any]:
        """Return a read-only view of ``count`` tokens at byte ``offset``."""
        dtype = numpy.dtype(dtype)
        if offset < 0 or count < 0 or offset + count * dtype.itemsize > self._size:
            got = max(0, min(self._size - offset, count * dtype.itemsize))
            raise _short_read(self.path, count, offset, dtype.itemsize, got)
        if offset + count * dtype.itemsize > self.guard_from:
            self.verify_size()
        return numpy.frombuffer(self._buffer, dtype=dtype, count=count, offset=offset)

    def tokens(self, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """Read-only view of the whole file as ``dtype`` (a trailing partial item is dropped)."""
        dtype = numpy.dtype(dtype)
        return numpy.frombuffer(self._buffer, dtype=dtype, count=self._size // dtype.itemsize)

    def close(self) -> None:
        """Drop the mapping; it is unmapped now, or when the last view is collected."""
        buffer, self._buffer = self._buffer, b""
        self._size = 0
        LIVE_MAPPINGS.discard(self)
        release(buffer)


def _shrunk(path: str, mapped: int, now: int) -> FormatError:
    return FormatError(
        f"{path}: the data file shrank from {mapped} to {now} bytes while it was "
        "memory-mapped (another process truncated or rewrote it in place); reading it "
        "further would crash this process with SIGBUS. Reopen the datasets once the file "
        "is complete, publish new data under a new prefix or by rename (as tokenloom's "
        "writers do), or read with mmap_bin_files=False (IndexedDataset(mmap=False)) "
        "where files may change under a running job"
    )


class FileBinReader(BinReader):
    """Reads with seek + readinto on a file handle, retrying ``OSError`` with back-off.

    With the defaults a failing read is tried 4 times, sleeping 10, 20 and 40 s in
    between (Megatron's policy for flaky network file systems).  A short read is a
    format error and is not retried.  The handle is reopened after ``fork``.
    """

    def __init__(
        self, bin_path: str, num_max_retries: int = 3, sleep_duration_start: float = 10
    ) -> None:
        self.path = bin_path
        self.num_max_retries = int(num_max_retries)
        self.sleep_duration_start = sleep_duration_start
        self._lock = threading.Lock()
        self._handle: Optional[io.FileIO] = None
        self._pid: Optional[int] = None
        _open_existing(bin_path).close()  # fail now on a missing/irregular/unreadable file

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            raise MissingFileError(f"{self.path}: data file does not exist") from None

    def _read_once(self, out: npt.NDArray[Any], offset: int) -> int:
        with self._lock:
            if self._handle is None or self._pid != os.getpid():
                self._handle = _open_existing(self.path)
                self._pid = os.getpid()
            self._handle.seek(offset)
            view = out.data.cast("B")
            done = 0
            while done < view.nbytes:
                got = self._handle.readinto(view[done:])
                if not got:
                    break
                done += got
            return done

    def read(self, dtype: npt.DTypeLike, count: int, offset: int) -> npt.NDArray[Any]:
        """Read ``count`` tokens at byte ``offset`` into a fresh writable array."""
        itemsize = numpy.dtype(dtype).itemsize
        if offset < 0 or count < 0 or offset + count * itemsize > _MAX_OFFSET:
            raise _short_read(self.path, count, offset, itemsize, 0)  # not worth a retry
        out = numpy.empty(count, dtype=dtype)
        sleep = self.sleep_duration_start
        for attempt in range(self.num_max_retries + 1):
            try:
                got = self._read_once(out, offset)
                break
            except MissingFileError:
                raise
            except OSError as error:
                self._drop_handle()
                if attempt == self.num_max_retries:
                    raise
                logger.warning(
                    "%s: read attempt %d/%d failed (%s); retrying in %ss",
                    self.path,
                    attempt + 1,
                    self.num_max_retries + 1,
                    error,
                    sleep,
                )
                time.sleep(sleep)
                sleep *= 2
        if got != out.nbytes:
            raise _short_read(self.path, count, offset, out.itemsize, got)
        return out

    def _drop_handle(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass

    def close(self) -> None:
        """Close the file handle (a later read reopens it)."""
        self._drop_handle()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_handle=None, _pid=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def storage_scheme(path: str) -> Optional[str]:
    """Return the URL scheme of ``path`` (``"s3"`` for ``s3://...``), None for local paths."""
    head, sep, _ = str(path).partition("://")
    return head if sep and head.isidentifier() else None


def check_local(path: str, object_storage_config: object = None) -> None:
    """ConfigError unless ``path`` names a local file and no object-storage config is
    given (``s3://`` / ``msc://`` prefixes are opened by :mod:`tokenloom.format.remote`)."""
    scheme = storage_scheme(path)
    if scheme is not None:
        raise ConfigError(
            f"{path}: no reader for storage scheme {scheme!r}; tokenloom reads s3:// and "
            "msc:// prefixes (through IndexedDataset) and local paths"
        )
    if object_storage_config is not None:
        raise ConfigError(
            f"{path}: object_storage_config is given for a local path; pass it only with "
            "s3:// or msc:// prefixes (drop it to read the local file)"
        )


def make_bin_reader(
    bin_path: str, mmap: bool = True, object_storage_config: object = None
) -> BinReader:
    """The reader of a local ``bin_path``: a memory map, or a file pointer with
    ``mmap=False``; ConfigError for a URL or an ``object_storage_config``
    (:func:`check_local`)."""
    check_local(bin_path, object_storage_config)
    return MMapBinReader(bin_path) if mmap else FileBinReader(bin_path)


__all__ = [
    "BinReader",
    "MMapBinReader",
    "FileBinReader",
    "check_local",
    "storage_scheme",
    "make_bin_reader",
]
