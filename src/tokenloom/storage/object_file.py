"""An object read as a file: ``preprocess --input s3://...`` and small objects such as sidecars.

:class:`ObjectFile` is a read-only, seekable binary file over one ``s3://`` or ``msc://``
object: each ``read`` is one ranged request (retried by the backend's policy) that
carries the ETag the object had when it was opened, so on S3 (``If-Match``) an object
replaced while it is read fails the read instead of mixing two versions (MSC's range
reads take no ETag).  :func:`open_object_file` wraps it in a
large buffer for sequential reads (JSONL streams, decompressors); Parquet reads it
unbuffered, by the ranges it asks for.

:func:`read_object_at_most` reads a whole small object under a size cap, the remote
side of :func:`tokenloom.untrusted_json.read_bounded`: an object larger than the cap is
refused from its HEAD, without being read, and a backend that tells no size is read
to the cap plus one byte, never more.
"""

from __future__ import annotations

import io
import os
from typing import Any, Optional

from tokenloom.errors import UntrustedFileError
from tokenloom.storage.datasets import config_or_default
from tokenloom.storage.objects import RemoteObject
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import parse_url

SEQUENTIAL_BUFFER_BYTES = 8 << 20
"""Bytes per request when an object is read from start to end (one GET each)."""
_UNKNOWN_SIZE_BLOCK = 8 << 20


class ObjectFile(io.RawIOBase):
    """One remote object as a read-only, seekable binary file (``name`` is its URL).

    Opening it sends one HEAD (ObjectNotFoundError, naming the URL, when it is missing).
    A backend that tells no size is read until a short answer; it cannot seek from its
    end (``io.UnsupportedOperation``)."""

    def __init__(self, remote: RemoteObject) -> None:
        super().__init__()
        info = remote.describe()
        self._remote = remote
        self._size: Optional[int] = None if info is None else int(info.size)
        self._etag: Optional[str] = (info.etag or None) if info is not None else None
        self._position = 0

    @property
    def name(self) -> str:
        """The object's URL."""
        return str(self._remote.url)

    @property
    def size(self) -> Optional[int]:
        """The object's size from the HEAD at open (None when the backend tells none)."""
        return self._size

    def readable(self) -> bool:
        """Always True."""
        return True

    def seekable(self) -> bool:
        """Always True (from the end only when the size is known)."""
        return True

    def tell(self) -> int:
        """The position of the next read."""
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the position (no request is made)."""
        self._checkClosed()
        if whence == os.SEEK_SET:
            position = offset
        elif whence == os.SEEK_CUR:
            position = self._position + offset
        elif whence == os.SEEK_END and self._size is not None:
            position = self._size + offset
        else:
            raise io.UnsupportedOperation(f"{self.name}: cannot seek with whence={whence}")
        if position < 0:
            raise ValueError(f"{self.name}: negative seek position {position}")
        self._position = position
        return position

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes (all the rest when negative) in one ranged request."""
        self._checkClosed()
        if size is None or size < 0:
            return self.readall()
        end = self._position + size
        if self._size is not None:
            end = min(end, self._size)
        if end <= self._position:
            return b""
        data = self._remote.read_range(
            self._position, end, self._etag, allow_short=self._size is None
        )
        self._position += len(data)
        return data

    def readall(self) -> bytes:
        """The rest of the object (one request when its size is known)."""
        if self._size is not None:
            return self.read(max(self._size - self._position, 0))
        pieces = []
        while piece := self.read(_UNKNOWN_SIZE_BLOCK):
            pieces.append(piece)
        return b"".join(pieces)

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from one ranged request; 0 at the end."""
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)


def _remote_object(url: str, config: Any) -> RemoteObject:
    return open_object(parse_url(url), config_or_default(config))


def open_object_file(url: str, config: Any = None, *, buffered: bool = True) -> Any:
    """The object at ``url`` as a binary file: buffered for sequential reads (requests
    of :data:`SEQUENTIAL_BUFFER_BYTES`), else the :class:`ObjectFile` itself."""
    raw = ObjectFile(_remote_object(url, config))
    return io.BufferedReader(raw, SEQUENTIAL_BUFFER_BYTES) if buffered else raw


def object_size(url: str, config: Any = None) -> Optional[int]:
    """The size of the object at ``url`` from one HEAD (None when the backend tells
    none); ObjectNotFoundError when it is missing."""
    info = _remote_object(url, config).describe()
    return None if info is None else int(info.size)


def object_identity(url: str, config: Any = None) -> dict[str, Any]:
    """``{"bytes", "etag"}`` of the object at ``url`` from one HEAD (``bytes`` None and
    ``etag`` ``""`` where the backend does not tell them)."""
    info = _remote_object(url, config).describe()
    return {"bytes": None if info is None else int(info.size), "etag": info.etag if info else ""}


def read_object_at_most(url: str, max_bytes: int, *, what: str, config: Any = None) -> bytes:
    """The whole object at ``url``, at most ``max_bytes`` bytes, else UntrustedFileError
    naming it, ``what`` it is and the limit (ObjectNotFoundError when it is missing)."""
    remote = _remote_object(url, config)
    info = remote.describe()
    if info is not None and info.size > max_bytes:
        problem = f"is larger than the limit of {max_bytes} bytes ({info.size} bytes)"
        raise UntrustedFileError(f"{what} {url}: {problem}", path=url, what=what, problem=problem)
    if info is not None:
        return remote.read_range(0, info.size, info.etag or None)
    data = remote.read_range(0, max_bytes + 1, None, allow_short=True)
    if len(data) > max_bytes:
        problem = f"is larger than the limit of {max_bytes} bytes"
        raise UntrustedFileError(f"{what} {url}: {problem}", path=url, what=what, problem=problem)
    return data


__all__ = [
    "SEQUENTIAL_BUFFER_BYTES",
    "ObjectFile",
    "open_object_file",
    "object_size",
    "object_identity",
    "read_object_at_most",
]
