"""``ObjectBinReader``: the ``.bin`` of an ``s3://`` or ``msc://`` dataset, read by chunks.

A read of ``size`` bytes at ``offset`` that no cached block covers fetches, in one
ranged request, Megatron's aligned block ``[offset // n * n, max(start + n, offset +
size))`` with ``n = bin_chunk_nbytes`` (clipped to the object's end).  Unlike Megatron,
up to ``max_cached_chunks`` blocks stay cached (least recently used dropped), reads of
S3 blocks carry ``If-Match: <ETag>`` (where the HEAD tells one) so a replaced object is
detected instead of mixed,
and ``read_ahead_chunks`` blocks are fetched in the background while reads move
forward block by block (the pattern a shuffled-but-chunked order produces).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import numpy

from tokenloom.errors import FormatError
from tokenloom.storage.config import ObjectStorageConfig, coerce_config
from tokenloom.storage.objects import RemoteObject
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import parse_url


@dataclass
class ReadStats:
    """What a reader fetched (for tests and benchmarks)."""

    requests: int = 0
    """Ranged requests sent (demand and read-ahead)."""

    bytes_fetched: int = 0
    """Bytes received."""

    hits: int = 0
    """Reads served from a cached block."""

    read_ahead: int = 0
    """Blocks fetched by read-ahead."""


def aligned_block(
    offset: int, nbytes: int, chunk: int, object_size: Optional[int]
) -> tuple[int, int]:
    """``[start, stop)`` fetched for a miss at ``[offset, offset + nbytes)``: Megatron's
    ``[offset // chunk * chunk, max(start + chunk, offset + nbytes))``, clipped to the object
    (when its size is known)."""
    start = offset // chunk * chunk
    stop = max(start + chunk, offset + nbytes)
    return start, stop if object_size is None else min(stop, object_size)


class ObjectBinReader:
    """Reads tokens from a remote ``.bin`` through a small block cache (thread-safe)."""

    def __init__(self, url: str, config: Any, remote: Optional[RemoteObject] = None) -> None:
        self.path = url
        self.config: ObjectStorageConfig = coerce_config(config)
        self._remote = remote if remote is not None else open_object(parse_url(url), self.config)
        info = self._remote.describe()  # a missing .bin fails here, naming the URL
        # None: a client that tells no size (an MSC client without info(), an S3 HEAD
        # without ContentLength); reads then learn the end from short answers
        self._size = None if info is None else info.size
        self._etag = "" if info is None else info.etag
        self._block = self.config.bin_chunk_nbytes
        self._capacity = self.config.max_cached_chunks + self.config.read_ahead_chunks
        self.stats = ReadStats()
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, tuple[int, bytes]] = OrderedDict()
        self._pending: dict[int, Future[bytes]] = {}
        self._executor: Optional[ThreadPoolExecutor] = None
        self._last_block = -1
        self._pid = os.getpid()

    @property
    def size(self) -> Optional[int]:
        """Size of the object in bytes (from the HEAD at open; None when the storage
        client cannot tell it without a full read)."""
        return self._size

    @property
    def etag(self) -> str:
        """ETag of the object at open."""
        return self._etag

    def tokens(self, dtype: Any) -> None:
        """No whole-file view: object storage is read by ranges."""
        return None

    def read(self, dtype: Any, count: int, offset: int) -> numpy.ndarray:
        """``count`` items of ``dtype`` at byte ``offset`` (a fresh, writable array)."""
        dtype = numpy.dtype(dtype)
        nbytes = count * dtype.itemsize
        if offset < 0 or count < 0 or (self._size is not None and offset + nbytes > self._size):
            raise FormatError(
                f"{self.path}: cannot read {count} tokens ({nbytes} bytes) at byte offset "
                f"{offset} of a {self._size}-byte object; the .bin is truncated or does not "
                "belong to this .idx"
            )
        if nbytes == 0:
            return numpy.empty(0, dtype=dtype)
        if self._pid != os.getpid():
            self._reset_process_state()  # a forked child: no parent threads or futures
        data, base = self._locate(offset, offset + nbytes)
        return numpy.frombuffer(data, dtype=dtype, count=count, offset=offset - base).copy()

    def _cached(self, start: int, end: int) -> Optional[tuple[bytes, int]]:
        for base, (stop, data) in self._blocks.items():
            if base <= start and end <= stop:
                self._blocks.move_to_end(base)
                return data, base
        return None

    def _locate(self, start: int, end: int) -> tuple[bytes, int]:
        block = start // self._block
        base, stop = aligned_block(start, end - start, self._block, self._size)
        with self._lock:
            self._maybe_read_ahead(block)
            found = self._cached(start, end)
            if found is not None:
                self.stats.hits += 1
                return found
            pending = self._pending.get(base)
        if pending is not None:
            data = pending.result()
            if base + len(data) >= end:
                return data, base
        data = self._fetch(base, stop)
        if base + len(data) < end:  # only where the size is unknown: the object ends early
            raise FormatError(
                f"{self.path}: cannot read bytes {start}-{end - 1}: the object ends at byte "
                f"{base + len(data)}; the .bin is truncated or does not belong to this .idx"
            )
        with self._lock:
            self._store(base, data)
        return data, base

    def _fetch(self, base: int, stop: int) -> bytes:
        if self._size is None:  # the end of the object shows as a short answer
            data = self._remote.read_range(base, stop, None, allow_short=True)
        else:  # (RemoteObject subclasses written before allow_short still work)
            data = self._remote.read_range(base, stop, self._etag or None)
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_fetched += len(data)
        return data

    def _store(self, base: int, data: bytes) -> None:
        self._blocks[base] = (base + len(data), data)
        self._blocks.move_to_end(base)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)

    def _maybe_read_ahead(self, block: int) -> None:
        """Under the lock: when reads just moved to the next block, prefetch the following
        ``read_ahead_chunks`` blocks (random access never triggers it)."""
        moved_on = block == self._last_block + 1
        self._last_block = block
        if not self.config.read_ahead_chunks or not moved_on or self._size is None:
            return  # (without a known size, read-ahead could ask beyond the end)
        for ahead in range(block + 1, block + 1 + self.config.read_ahead_chunks):
            base = ahead * self._block
            if base >= self._size:
                break  # past the end: so are the blocks after it
            if base in self._blocks or base in self._pending:
                continue
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(4, self.config.read_ahead_chunks),
                    thread_name_prefix="tokenloom-read-ahead",
                )
            stop = min(base + self._block, self._size)
            self._pending[base] = self._executor.submit(self._prefetch, base, stop)

    def _prefetch(self, base: int, stop: int) -> bytes:
        try:
            data = self._fetch(base, stop)
            with self._lock:
                self.stats.read_ahead += 1
                self._store(base, data)
            return data
        finally:
            with self._lock:
                self._pending.pop(base, None)

    def clear_cache(self) -> None:
        """Drop the cached blocks."""
        with self._lock:
            self._blocks.clear()

    def close(self) -> None:
        """Drop the cached blocks and stop read-ahead (waiting for a request in flight);
        arrays handed out stay valid."""
        with self._lock:
            executor, self._executor = self._executor, None
            self._blocks.clear()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["config"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"ObjectBinReader({self.path!r}, size={self._size}, "
            f"chunk={self._block}, read_ahead={self.config.read_ahead_chunks})"
        )


__all__ = ["ObjectBinReader", "ReadStats", "aligned_block"]


class S3BinReader(ObjectBinReader):
    """The ``.bin`` of an ``s3://`` dataset (megatron-core's ``_S3BinReader`` arguments)."""

    def __init__(
        self, bin_path: str, object_storage_config: Any, remote: Optional[RemoteObject] = None
    ) -> None:
        super().__init__(bin_path, object_storage_config, remote)


class MSCBinReader(ObjectBinReader):
    """The ``.bin`` of an ``msc://`` dataset (megatron-core's
    ``_MultiStorageClientBinReader`` arguments)."""

    def __init__(
        self, bin_path: str, object_storage_config: Any, remote: Optional[RemoteObject] = None
    ) -> None:
        super().__init__(bin_path, object_storage_config, remote)


def object_bin_reader(url: str, config: Any) -> ObjectBinReader:
    """The reader class of ``url``'s scheme (s3:// or msc://), opened."""
    cls = S3BinReader if url.startswith("s3://") else MSCBinReader
    return cls(url, config)
