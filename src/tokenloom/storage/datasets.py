"""Whole remote datasets: open a ``.bin``/``.idx`` pair, test that it exists, upload one.

These are the calls ``IndexedDataset``, the builder and the command line make; each
takes the dataset *prefix* (``s3://bucket/path/name`` without ``.bin``/``.idx``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from tokenloom.errors import ObjectNotFoundError
from tokenloom.storage.bin_reader import ObjectBinReader, object_bin_reader
from tokenloom.storage.config import ObjectStorageConfig, coerce_config
from tokenloom.storage.index_cache import fetch_index
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import parse_url

logger = logging.getLogger("tokenloom.storage")

_ENV_CACHE = "TOKENLOOM_IDX_CACHE"


def default_idx_cache() -> str:
    """``$TOKENLOOM_IDX_CACHE``, else ``~/.cache/tokenloom/idx`` (used when no folder is given)."""
    return os.environ.get(_ENV_CACHE) or os.path.join(
        os.path.expanduser("~"), ".cache", "tokenloom", "idx"
    )


def config_or_default(config: Any) -> ObjectStorageConfig:
    """``config`` as an ObjectStorageConfig; None gives the default ``.idx`` cache folder."""
    if config is None:
        return ObjectStorageConfig(path_to_idx_cache=default_idx_cache())
    return coerce_config(config)


def open_remote_dataset(path_prefix: str, config: Any) -> tuple[str, ObjectBinReader]:
    """``(local .idx path, .bin reader)`` of a remote dataset; the ``.idx`` is fetched
    into the cache unless a fresh copy is there."""
    config = coerce_config(config)
    try:
        local_idx = fetch_index(path_prefix + ".idx", config)
    except ObjectNotFoundError as error:
        raise ObjectNotFoundError(
            f"{path_prefix}.idx: the index of dataset {path_prefix!r} does not exist ({error})"
        ) from error
    try:
        reader = object_bin_reader(path_prefix + ".bin", config)
    except ObjectNotFoundError as error:
        raise ObjectNotFoundError(
            f"{path_prefix}.bin: the data file of dataset {path_prefix!r} does not exist ({error})"
        ) from error
    return local_idx, reader


def dataset_exists(path_prefix: str, config: Any = None) -> bool:
    """Whether both ``<prefix>.idx`` and ``<prefix>.bin`` exist (False on 404)."""
    config = config_or_default(config)
    url = parse_url(path_prefix + ".idx")
    return all(
        open_object(url.with_key(url.key[:-4] + suffix), config).exists()
        for suffix in (".idx", ".bin")
    )


def upload_dataset(local_prefix: str, remote_prefix: str, config: Any = None) -> None:
    """Upload a finished local pair: the ``.bin`` first, then the ``.idx``, so readers
    that look for the ``.idx`` never find a dataset whose ``.bin`` is still missing.

    Each object appears only once complete (S3 multipart uploads and MSC writes are
    atomic); the size of each is checked after the upload.
    """
    config = config_or_default(config)
    parse_url(remote_prefix + ".idx", for_writing=True)  # refused before any upload
    for suffix in (".bin", ".idx"):
        remote = open_object(parse_url(remote_prefix + suffix), config)
        logger.info("uploading %s%s to %s%s", local_prefix, suffix, remote_prefix, suffix)
        remote.upload(local_prefix + suffix)


def remote_object_identity(path_prefix: str, config: Optional[Any] = None) -> dict:
    """``{".idx": (size, etag), ".bin": (size, etag)}``: what a cache key of a remote
    dataset must include (both change when either object is replaced)."""
    config = config_or_default(config)
    out = {}
    for suffix in (".idx", ".bin"):
        info = open_object(parse_url(path_prefix + suffix), config).head()
        out[suffix] = (info.size, info.etag)
    return out


__all__ = [
    "open_remote_dataset",
    "dataset_exists",
    "upload_dataset",
    "default_idx_cache",
    "config_or_default",
    "remote_object_identity",
]
