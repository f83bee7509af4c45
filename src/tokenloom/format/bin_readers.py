"""Readers of a local ``.bin`` token file: memory map and file pointer.

Every reader implements :class:`BinReader`.  :func:`make_bin_reader` picks one for a
local file from the ``IndexedDataset`` arguments.  ``s3://`` and ``msc://`` pairs take
one other path, :mod:`tokenloom.format.remote`, whose reader
(:class:`tokenloom.storage.ObjectBinReader`) implements the same interface. Both local
readers are members of :data:`tokenloom.format.bin_pool.BIN_POOL`, which bounds the
mappings and descriptors open at once.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from typing import Any, Optional

import numpy
import numpy.typing as npt

from tokenloom.errors import ConfigError, FormatError
from tokenloom.format._mapping import (
    LIVE_MAPPINGS,
    Buffer,
    map_readonly,
    refused,
    release,
    warn_refused,
)
from tokenloom.format.bin_base import (
    GUARDED_TAIL,
    BinReader,
    open_data_file,
    reopen_same,
    short_read,
    stat_identity,
)
from tokenloom.format.bin_pool import BIN_POOL
from tokenloom.format.pread_reader import FileBinReader

logger = logging.getLogger(__name__)


class MMapBinReader(BinReader):
    """Memory-maps the ``.bin`` file at open; reads are zero-copy views.

    The mapping is one member of :data:`~tokenloom.format.bin_pool.BIN_POOL`: evicted
    when unused, mapped again on the next read (the file checked to be the same). A
    refused mapping (an mmap quota) falls back to ``pread`` for this file, with one
    warning per process. Views keep their mapping alive: eviction and ``close()`` only
    drop this reader's reference, the memory is unmapped when the last view is collected.
    """

    def __init__(self, bin_path: str) -> None:
        self.path = bin_path
        self.failure: Optional[FormatError] = None
        self.stamp = next(BIN_POOL.clock)
        self._lock = threading.Lock()
        self._buffer: Optional[Buffer] = None
        self._typed: Optional[npt.NDArray[Any]] = None  # the whole file as ``_dtype``
        self._dtype: numpy.dtype[Any] = numpy.dtype(numpy.uint8)
        self._fallback: Optional[FileBinReader] = None
        with open_data_file(bin_path) as handle:
            stat = os.fstat(handle.fileno())
            self._size, self._file = stat.st_size, (stat.st_dev, stat.st_ino)
            self._known = stat_identity(stat)
            fresh = self._map_locked(handle)  # mapped at open, as before the pool
        self.guard_from = max(0, self._size - GUARDED_TAIL)
        LIVE_MAPPINGS.add(self)
        if fresh:
            BIN_POOL.admit(self)

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        return self._size

    @property
    def mapped(self) -> bool:
        """Whether the file is mapped now (False: evicted, never read, or read by pread)."""
        return self._buffer is not None

    @property
    def reads_by_pread(self) -> bool:
        """Whether the mapping was refused and the file is read with ``pread``."""
        return self._fallback is not None

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

    def current(self) -> Optional[npt.NDArray[Any]]:
        """The whole file as the dtype last given to :meth:`tokens` (mapped again if it
        was evicted), or None when it is read by ``pread``: the hot path's accessor."""
        self.stamp = next(BIN_POOL.clock)
        typed = self._typed
        return self._remap() if typed is None else typed

    def _remap(self) -> Optional[npt.NDArray[Any]]:
        with self._lock:
            fresh = self._typed is None and self._map_locked()
            typed = self._typed
        if fresh:
            BIN_POOL.admit(self)
        return typed

    def _map_locked(self, handle: Optional[io.FileIO] = None) -> bool:
        """Map the file (under ``_lock``, or in ``__init__`` with its ``handle``);
        whether a new mapping joined the pool."""
        fresh = False
        if self._buffer is None and self._size and self._fallback is None:
            if handle is None:
                with reopen_same(self.path, self._known) as again:
                    fresh = self._map_handle(again)
            else:
                fresh = self._map_handle(handle)
        buffer = self._buffer
        if buffer is not None or not self._size:
            count = self._size // self._dtype.itemsize
            self._typed = numpy.frombuffer(
                b"" if buffer is None else buffer, dtype=self._dtype, count=count
            )
        return fresh

    def _map_handle(self, handle: io.FileIO) -> bool:
        try:
            self._buffer = map_readonly(handle, self._size)  # no descriptor kept
            return True
        except OSError as error:
            if not refused(error):
                raise
            warn_refused(self.path, error, "reading it with pread instead")
            self._fallback = FileBinReader(self.path, known=self._known)
            return False

    def read(self, dtype: npt.DTypeLike, count: int, offset: int) -> npt.NDArray[Any]:
        """Return a read-only view of ``count`` tokens at byte ``offset`` (a fresh array
        when the file is read by ``pread``)."""
        dtype = numpy.dtype(dtype)
        if offset < 0 or count < 0 or offset + count * dtype.itemsize > self._size:
            got = max(0, min(self._size - offset, count * dtype.itemsize))
            raise short_read(self.path, count, offset, dtype.itemsize, got)
        if offset + count * dtype.itemsize > self.guard_from:
            self.verify_size()
        self.stamp = next(BIN_POOL.clock)
        buffer = self._buffer
        if buffer is None:
            self._remap()
            buffer, fallback = self._buffer, self._fallback
            if buffer is None and fallback is not None:
                return fallback.read(dtype, count, offset)
        return numpy.frombuffer(
            b"" if buffer is None else buffer, dtype=dtype, count=count, offset=offset
        )

    def tokens(self, dtype: npt.DTypeLike) -> Optional[npt.NDArray[Any]]:
        """Read-only view of the whole file as ``dtype`` (a trailing partial item is
        dropped), or None when the file is read by ``pread``. Hold it only while reading:
        a held view keeps its mapping alive past eviction."""
        dtype = numpy.dtype(dtype)
        if dtype != self._dtype:
            with self._lock:
                self._dtype, self._typed = dtype, None
        return self.current()

    def evict(self) -> None:
        """Drop the mapping (the pool's eviction); the next read maps the file again."""
        with self._lock:
            buffer, self._buffer, self._typed = self._buffer, None, None
        if buffer is not None:
            release(buffer)

    def forget_after_fork(self) -> None:
        """In a forked child: nothing (an inherited mapping stays valid and holds no
        descriptor; a ``pread`` fallback is a pool member of its own)."""

    def close(self) -> None:
        """Drop the mapping; it is unmapped now, or when the last view is collected."""
        self._size = 0
        self.guard_from = max(0, self.guard_from)
        LIVE_MAPPINGS.discard(self)
        BIN_POOL.leave(self)
        self.evict()
        fallback, self._fallback = self._fallback, None
        if fallback is not None:
            fallback.close()


def _shrunk(path: str, mapped: int, now: int) -> FormatError:
    return FormatError(
        f"{path}: the data file shrank from {mapped} to {now} bytes while it was "
        "memory-mapped (another process truncated or rewrote it in place); reading it "
        "further would crash this process with SIGBUS. Reopen the datasets once the file "
        "is complete, publish new data under a new prefix or by rename (as tokenloom's "
        "writers do), or read with mmap_bin_files=False (IndexedDataset(mmap=False)) "
        "where files may change under a running job"
    )


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
