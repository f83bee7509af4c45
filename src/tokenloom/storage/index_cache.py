"""The local ``.idx`` cache of remote datasets: Megatron's layout, reused when fresh.

``s3://bucket/key.idx`` (``msc://profile/key.idx``) is copied to
``<path_to_idx_cache>/bucket/key.idx`` (``.../profile/key.idx``), as megatron-core
does; ``s3:///key.idx`` (an empty bucket) to ``<path_to_idx_cache>/key.idx`` (the
cache folder plus the path without ``s3://``, megatron-core's rule read as a path
inside the folder: its ``os.path.join`` would name the source ``/key.idx`` itself).
Next to it ``key.idx.etag.json`` records the object's ETag and size; a later open
sends one HEAD and reuses the copy when both match (Megatron downloads it on every
construction).  Both files are written atomically, so a crash leaves the old copy or
the new one, and a stale, half-written or crafted record (too large, too deep, a
symlink to a device: :mod:`tokenloom.untrusted_json`) only causes a new download.

A client that tells no size or no ETag (a HEAD answered ``{}``, an MSC client without
``info``) gets the ``.idx`` downloaded to a temporary sibling on every open; the
digest of its content stands in for the ETag, and the cached copy is kept, untouched,
when it has the same content.

Object storage knows nothing of ranks: the download of a blend's ``.idx`` files under
``torch.distributed`` (rank 0 first, then once per node) is
:func:`tokenloom.builder.remote_indices.fetch_indices_on_rank0_then_others`, which calls
:func:`fetch_index` and :func:`recorded_infos`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.atomic import atomic_write_bytes, temporary_sibling
from tokenloom.errors import ConfigError
from tokenloom.storage.config import coerce_config
from tokenloom.storage.objects import ObjectInfo, RemoteObject, file_content_info
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import parse_url
from tokenloom.untrusted_json import read_json_file

logger = logging.getLogger("tokenloom.storage")

_RECORD_SUFFIX = ".etag.json"
_MAX_RECORD_BYTES = 64 * 1024  # {"etag": ..., "size": ...} is under 200 bytes


def index_cache_path(idx_url: str, path_to_idx_cache: str) -> str:
    """``<path_to_idx_cache>/<bucket-or-profile>/<key>``: where ``idx_url`` is cached
    (``<path_to_idx_cache>/<key>`` for an empty bucket, ``s3:///key``)."""
    url = parse_url(idx_url)
    parts = url.key.split("/")
    if ".." in parts:
        raise ConfigError(f"{idx_url}: '..' in an object key would leave the .idx cache folder")
    return os.path.join(path_to_idx_cache, *([url.bucket] if url.bucket else []), *parts)


def _read_record(local: str) -> Optional[dict[str, Any]]:
    """The ETag record of ``local``; None when missing or unusable (too large, too deep,
    not a regular file, not JSON): the ``.idx`` is then downloaded again."""
    try:
        record = read_json_file(
            local + _RECORD_SUFFIX, what="ETag record", max_bytes=_MAX_RECORD_BYTES, max_depth=4
        )
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):  # UntrustedFileError is a ValueError
        return None


def is_fresh(local: str, info: ObjectInfo) -> bool:
    """Whether ``local`` is a complete copy of the object ``info`` describes."""
    record = _read_record(local)
    if record is None or record.get("etag") != info.etag or record.get("size") != info.size:
        return False
    try:
        return os.path.getsize(local) == info.size
    except OSError:
        return False


def fetch_index(idx_url: str, config: Any, expected: Optional[ObjectInfo] = None) -> str:
    """Local path of a fresh copy of ``idx_url``, downloading it unless already cached.

    ``expected`` (what another rank saw) skips the HEAD when the local copy matches it.
    Raises ObjectNotFoundError naming the URL when the ``.idx`` object is missing.
    """
    config = coerce_config(config)
    local = index_cache_path(idx_url, config.path_to_idx_cache)
    if expected is not None and is_fresh(local, expected):
        return local
    remote = open_object(parse_url(idx_url), config)
    info = remote.describe()
    if info is None or not info.etag:  # the client tells no size or ETag
        return _fetch_by_content(idx_url, remote, local)
    if is_fresh(local, info):
        logger.debug("%s: reusing the cached copy %s (ETag %s)", idx_url, local, info.etag)
        return local
    logger.info("%s: downloading the index to %s (%d bytes)", idx_url, local, info.size)
    got = remote.download(local)
    _write_record(local, idx_url, ObjectInfo(got.size, got.etag or info.etag))
    return local


def _write_record(local: str, idx_url: str, info: ObjectInfo) -> None:
    record = {"url": idx_url, "etag": info.etag, "size": info.size}
    atomic_write_bytes(local + _RECORD_SUFFIX, json.dumps(record).encode(), durable=False)


def _content_info(path: str) -> Optional[ObjectInfo]:
    try:
        return file_content_info(path)
    except OSError:
        return None


def _fetch_by_content(idx_url: str, remote: RemoteObject, local: str) -> str:
    """For a client that tells no size or ETag: download to a temporary sibling (the
    digest of the content is the ETag); the cached copy is kept, untouched, when its
    record and its bytes match, else replaced."""
    logger.info("%s: downloading the index to %s (its size or ETag is unknown)", idx_url, local)
    tmp = temporary_sibling(local)
    try:
        got = remote.download(tmp)
        if not got.etag:  # an MSC info() without an ETag
            got = file_content_info(tmp)
        if is_fresh(local, got) and _content_info(local) == got:
            logger.debug("%s: the cached copy %s has the same content", idx_url, local)
            return local
        os.replace(tmp, local)
        _write_record(local, idx_url, got)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return local


def recorded_infos(config: Any, idx_urls: Sequence[str]) -> dict[str, ObjectInfo]:
    """``{url: ObjectInfo}`` of the cached copies whose ETag record is readable: what a
    rank that fetched them tells the others (who then skip the HEAD if they see the same)."""
    config = coerce_config(config)
    described = {}
    for url in idx_urls:
        record = _read_record(index_cache_path(url, config.path_to_idx_cache))
        if record is not None:
            described[url] = ObjectInfo(int(record["size"]), str(record["etag"]))
    return described


__all__ = ["index_cache_path", "fetch_index", "is_fresh", "recorded_infos"]
