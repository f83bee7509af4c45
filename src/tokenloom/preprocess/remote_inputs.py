"""Inputs in object storage: ``--input s3://bucket/key`` and ``msc://profile/path``.

An object is read as a local file is, with the same formats and the same errors:
JSONL (plain, gzip, zstd, bzip2, xz; recognised by its first bytes) is streamed from
start to end through a buffer, one ranged request per 8 MiB, never downloaded whole;
Parquet is read by the ranges pyarrow asks for (its footer, then the key columns).
On S3 every read is pinned to the object's ETag at open, so an object replaced during
the run fails it instead of mixing versions (:mod:`tokenloom.storage.object_file`).

Each object is named in full: globs are not expanded in object storage.  Credentials
and endpoints come from the usual places (``AWS_*`` variables, ``MSC_CONFIG``), as for
datasets read from object storage (docs/object-storage.md).  :mod:`tokenloom.storage`
is imported only when such an input is given.
"""

from __future__ import annotations

import glob
from typing import IO, Any, Optional

from tokenloom.errors import ObjectNotFoundError, PreprocessError

_SCHEMES = ("s3://", "msc://")


def is_remote_input(path: Any) -> bool:
    """Whether ``path`` names an object (``s3://`` or ``msc://``, Megatron's rule)."""
    return isinstance(path, str) and path.startswith(_SCHEMES)


def check_remote_input(url: str) -> str:
    """``url`` when it names one object; PreprocessError for a glob or a malformed URL."""
    from tokenloom.errors import ConfigError
    from tokenloom.storage.urls import parse_url

    if glob.has_magic(url):
        raise PreprocessError(
            f"--input {url!r}: globs are not expanded in object storage; name each "
            "object (e.g. --input s3://bucket/a.jsonl s3://bucket/b.jsonl)"
        )
    try:
        parse_url(url)
    except ConfigError as error:
        raise PreprocessError(f"--input {error}") from None
    return url


def _missing(url: str, error: ObjectNotFoundError) -> PreprocessError:
    return PreprocessError(
        f"--input {url!r}: no such object ({error}); check the bucket and key, or the "
        "endpoint (AWS_ENDPOINT_URL) and profile"
    )


def remote_input_size(url: str) -> Optional[int]:
    """The object's size from one HEAD (None when the backend tells none)."""
    from tokenloom.storage.object_file import object_size

    try:
        return object_size(url)
    except ObjectNotFoundError as error:
        raise _missing(url, error) from None


def open_remote_input(url: str, buffered: bool = True) -> IO[bytes]:
    """The object as a binary file (see :func:`tokenloom.storage.object_file.open_object_file`)."""
    from tokenloom.storage.object_file import open_object_file

    try:
        return open_object_file(url, buffered=buffered)
    except ObjectNotFoundError as error:
        raise _missing(url, error) from None


__all__ = [
    "is_remote_input",
    "check_remote_input",
    "remote_input_size",
    "open_remote_input",
]
