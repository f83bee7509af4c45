"""Pick the object class for a URL's scheme."""

from __future__ import annotations

from tokenloom.errors import ConfigError
from tokenloom.storage.config import ObjectStorageConfig
from tokenloom.storage.msc import MSCObject
from tokenloom.storage.objects import RemoteObject
from tokenloom.storage.s3 import S3Object
from tokenloom.storage.urls import StorageURL


def open_object(url: StorageURL, config: ObjectStorageConfig) -> RemoteObject:
    """The :class:`RemoteObject` of ``url`` (no request is made)."""
    if url.scheme == "s3":
        return S3Object(url, config)
    if url.scheme == "msc":
        return MSCObject(url, config)
    raise ConfigError(f"{url}: unknown object-storage scheme {url.scheme!r} (s3 or msc)")


__all__ = ["open_object"]
