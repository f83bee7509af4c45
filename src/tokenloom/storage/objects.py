"""What every remote object offers: HEAD, ranged reads, download, upload, existence.

Where a storage client tells no ETag, the digest of the object's content stands in
for it (:func:`content_digest`, :func:`content_etag`, :func:`file_content_info`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.errors import ObjectNotFoundError
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.urls import StorageURL


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD says about an object."""

    size: int
    """Length in bytes."""

    etag: str
    """The server's entity tag (changes whenever the object is replaced), or the
    :func:`content_etag` of the content where the client tells none; ``""`` unknown."""


_CONTENT_ETAG = "content-blake2b-128:"
_PIECE = 8 << 20


def content_digest() -> Any:
    """A new hash of object content (BLAKE2b, 16 bytes), fed with ``update(bytes)``."""
    return hashlib.blake2b(digest_size=16)


def content_etag(digest: Any) -> str:
    """The stand-in ETag of content hashed by a :func:`content_digest`."""
    return f"{_CONTENT_ETAG}{digest.hexdigest()}"


def file_content_info(path: str) -> ObjectInfo:
    """Size and :func:`content_etag` of a local file (read in bounded pieces)."""
    digest, size = content_digest(), 0
    with open(path, "rb") as handle:
        while piece := handle.read(_PIECE):
            digest.update(piece)
            size += len(piece)
    return ObjectInfo(size, content_etag(digest))


class RemoteObject(ABC):
    """One object in S3 or behind an MSC profile."""

    url: StorageURL
    config: ObjectStorageConfig

    @abstractmethod
    def head(self) -> ObjectInfo:
        """Size and ETag (ObjectNotFoundError when missing)."""

    def describe(self) -> Optional[ObjectInfo]:
        """Size and ETag where the backend tells them without a full read (a HEAD; the
        ETag ``""`` where only the size is told), else None once the object is known to
        exist; ObjectNotFoundError when it is missing."""
        return self.head()

    @abstractmethod
    def read_range(
        self, start: int, end: int, etag: Optional[str] = None, allow_short: bool = False
    ) -> bytes:
        """Bytes ``[start, end)``; ``b""`` for an empty range, without a request.

        ``allow_short``: the caller does not know the object's size, so fewer bytes mean
        that the object ends there (rather than a truncated answer to retry)."""

    @abstractmethod
    def download(self, local_path: str) -> ObjectInfo:
        """Atomically copy the object to ``local_path``."""

    @abstractmethod
    def upload(self, local_path: str) -> None:
        """Replace the object with the local file (never leaving a partial object)."""

    def exists(self) -> bool:
        """Whether the object exists (False on 404; other failures raise)."""
        try:
            self.describe()
        except ObjectNotFoundError:
            return False
        return True


__all__ = ["ObjectInfo", "RemoteObject", "content_digest", "content_etag", "file_content_info"]
