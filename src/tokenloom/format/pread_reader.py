"""``FileBinReader``: reads a local ``.bin`` with ``pread`` on a pooled descriptor."""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from typing import Any, Optional

import numpy
import numpy.typing as npt

from tokenloom.errors import FormatError
from tokenloom.format.bin_base import (
    MAX_OFFSET,
    BinReader,
    open_data_file,
    reopen_same,
    short_read,
    stat_identity,
)
from tokenloom.format.bin_pool import BIN_POOL
from tokenloom.format.spec import MissingFileError

__all__ = ["FileBinReader"]

logger = logging.getLogger(__name__)


class FileBinReader(BinReader):
    """Reads with ``pread`` on a file descriptor, retrying ``OSError`` with back-off.

    With the defaults a failing read is tried 4 times, sleeping 10, 20 and 40 s in
    between (Megatron's policy for flaky network file systems).  A short read is a
    format error and is not retried.  The descriptor is one member of
    :data:`~tokenloom.format.bin_pool.BIN_POOL` (closed when unused, reopened on the
    next read, the file checked to be the one first opened) and is reopened after
    ``fork`` (the child never reads through the parent's descriptor).
    """

    def __init__(
        self,
        bin_path: str,
        num_max_retries: int = 3,
        sleep_duration_start: float = 10,
        *,
        known: Optional[tuple[int, int, int, int]] = None,
    ) -> None:
        self.path = bin_path
        self.num_max_retries = int(num_max_retries)
        self.sleep_duration_start = sleep_duration_start
        self.stamp = 0
        self._lock = threading.Lock()
        self._handle: Optional[io.FileIO] = None
        self._pid: Optional[int] = None
        if known is None:  # fail now on a missing/irregular/unreadable file
            with open_data_file(bin_path) as handle:
                known = stat_identity(os.fstat(handle.fileno()))
        self._known = known

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            raise MissingFileError(f"{self.path}: data file does not exist") from None

    def _read_once(self, out: npt.NDArray[Any], offset: int) -> int:
        self.stamp = next(BIN_POOL.clock)
        with self._lock:  # held while reading: eviction never closes a descriptor in use
            opened = self._handle is None or self._pid != os.getpid()
            if opened:
                self._handle = reopen_same(self.path, self._known)
                self._pid = os.getpid()
            fd = self._handle.fileno()  # type: ignore[union-attr]
            view = out.data.cast("B")
            done = 0
            while done < view.nbytes:
                got = os.preadv(fd, [view[done:]], offset + done)
                if not got:
                    break
                done += got
        if opened:
            BIN_POOL.admit(self)
        return done

    def read(self, dtype: npt.DTypeLike, count: int, offset: int) -> npt.NDArray[Any]:
        """Read ``count`` tokens at byte ``offset`` into a fresh writable array."""
        itemsize = numpy.dtype(dtype).itemsize
        if offset < 0 or count < 0 or offset + count * itemsize > MAX_OFFSET:
            raise short_read(self.path, count, offset, itemsize, 0)  # not worth a retry
        out = numpy.empty(count, dtype=dtype)
        sleep = self.sleep_duration_start
        for attempt in range(self.num_max_retries + 1):
            try:
                got = self._read_once(out, offset)
                break
            except (MissingFileError, FormatError):
                raise
            except OSError as error:
                self.close()
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
            raise short_read(self.path, count, offset, out.itemsize, got)
        return out

    def evict(self) -> None:
        """Close the descriptor (the pool's eviction); the next read reopens it."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass

    def forget_after_fork(self) -> None:
        """In a forked child: close this process's copy of the inherited descriptor
        (the parent's stays open); the next read opens the file anew."""
        handle, self._handle = self._handle, None
        self._lock = threading.Lock()
        BIN_POOL.leave(self)
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass

    def close(self) -> None:
        """Close the file descriptor (a later read reopens it)."""
        BIN_POOL.leave(self)
        self.evict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_handle=None, _pid=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
