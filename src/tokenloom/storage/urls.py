"""Object-storage URLs: ``s3://bucket/key`` and ``msc://profile/path``.

A dataset prefix is *remote* when it starts with ``s3://`` or ``msc://`` (Megatron's
rule).  :func:`parse_url` splits such a URL into its scheme, its bucket (S3) or
profile (MSC) and its key, with a clear error for a URL that has no key, or no profile.

``s3:///key`` (an empty bucket) is read as megatron-core's ``parse_s3_path`` reads it:
bucket ``""``, the key after the third slash.  No real S3 has such a bucket (boto3
refuses the name); it is how a client that maps buckets to local folders (megatron-core's
tests hand one to ``boto3.client``) reaches ``/key``.  It can be read, never written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from tokenloom.errors import ConfigError

S3_PREFIX = "s3://"
MSC_PREFIX = "msc://"
REMOTE_PREFIXES = (S3_PREFIX, MSC_PREFIX)


def is_remote(path: Union[str, os.PathLike[str]]) -> bool:
    """True for ``s3://...`` and ``msc://...`` paths (Megatron's ``is_object_storage_path``)."""
    return isinstance(path, str) and path.startswith(REMOTE_PREFIXES)


@dataclass(frozen=True)
class StorageURL:
    """One object in object storage."""

    scheme: str
    """``"s3"`` or ``"msc"``."""

    bucket: str
    """The S3 bucket, or the MSC profile name."""

    key: str
    """The object key (S3) or the path inside the profile (MSC), without a leading slash."""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"

    def with_key(self, key: str) -> StorageURL:
        """The URL of another key in the same bucket / profile."""
        return StorageURL(self.scheme, self.bucket, key)


def parse_url(url: str, *, for_writing: bool = False) -> StorageURL:
    """Split ``s3://bucket/key`` or ``msc://profile/path`` (ConfigError when malformed).

    ``s3:///key`` gives bucket ``""`` (megatron-core's reading); with ``for_writing`` it
    is refused (see :func:`check_writable`)."""
    if not is_remote(url):
        raise ConfigError(
            f"{url!r} is not an object-storage URL: expected s3://bucket/key or msc://profile/path"
        )
    scheme, rest = url.split("://", 1)
    bucket, sep, key = rest.partition("/")
    if not bucket and scheme != "s3":
        raise ConfigError(f"{url!r}: the URL has no profile: write {scheme}://PROFILE/path")
    if not sep or not key or key.endswith("/"):
        raise ConfigError(
            f"{url!r}: the URL names no object inside {scheme}://{bucket}/; "
            "give the full key of the dataset prefix"
        )
    parsed = StorageURL(scheme, bucket, key)
    return check_writable(parsed) if for_writing else parsed


def check_writable(url: StorageURL) -> StorageURL:
    """``url`` when objects can be written there; ConfigError for an empty bucket."""
    if not url.bucket:
        raise ConfigError(
            f"{url}: the URL has no bucket; an empty bucket (s3:///key, as megatron-core "
            "parses it) is only read, through a client that maps it; write to "
            "s3://BUCKET/key"
        )
    return url


__all__ = [
    "S3_PREFIX",
    "MSC_PREFIX",
    "REMOTE_PREFIXES",
    "StorageURL",
    "check_writable",
    "is_remote",
    "parse_url",
]
