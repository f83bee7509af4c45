"""What every remote object offers: HEAD, ranged reads, download, upload, existence."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

from tokenloom.errors import ObjectNotFoundError
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.urls import StorageURL


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD says about an object."""

    size: int
    """Length in bytes."""

    etag: str
    """The server's entity tag (changes whenever the object is replaced)."""


class RemoteObject(ABC):
    """One object in S3 or behind an MSC profile."""

    url: StorageURL
    config: ObjectStorageConfig

    @abstractmethod
    def head(self) -> ObjectInfo:
        """Size and ETag (ObjectNotFoundError when missing)."""

    def describe(self) -> Optional[ObjectInfo]:
        """Size and ETag where the backend tells them without a full read (a HEAD), else
        None once the object is known to exist; ObjectNotFoundError when it is missing."""
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
            self.head()
        except ObjectNotFoundError:
            return False
        return True


__all__ = ["ObjectInfo", "RemoteObject"]
