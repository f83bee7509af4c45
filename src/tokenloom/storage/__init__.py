"""Object storage: datasets read straight from ``s3://`` and ``msc://`` (Multi-Storage Client).

* :class:`ObjectStorageConfig` (``S3Config``: deprecated alias), Megatron's config,
  plus chunk cache size, read-ahead, endpoint / region / profile and a
  :class:`RetryPolicy`.
* :func:`open_remote_dataset`: ``.idx`` fetched into Megatron's cache layout (reused
  when its ETag and size match), ``.bin`` read by :class:`ObjectBinReader`.
* :func:`dataset_exists`, :func:`upload_dataset`, :func:`fetch_index`.

Storage knows nothing of ranks: the ``.idx`` download of a blend under
torch.distributed is :mod:`tokenloom.builder.remote_indices`.

boto3 (``tokenloom[s3]``) and multi-storage-client (``tokenloom[msc]``) are imported
only when a request is made.
"""

from __future__ import annotations

from tokenloom.storage.bin_reader import ObjectBinReader, ReadStats
from tokenloom.storage.clients import clear_clients
from tokenloom.storage.config import (
    DEFAULT_CHUNK_NBYTES,
    ObjectStorageConfig,
    RetryPolicy,
    S3Config,
    coerce_config,
)
from tokenloom.storage.datasets import (
    config_or_default,
    dataset_exists,
    default_idx_cache,
    open_remote_dataset,
    remote_object_identity,
    upload_dataset,
)
from tokenloom.storage.index_cache import (
    fetch_index,
    index_cache_path,
    is_fresh,
    recorded_infos,
)
from tokenloom.storage.integration import (
    local_folder_for,
    open_remote_pair,
    storage_config_for,
)
from tokenloom.storage.objects import ObjectInfo, RemoteObject
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import MSC_PREFIX, S3_PREFIX, StorageURL, is_remote, parse_url

__all__ = [
    "DEFAULT_CHUNK_NBYTES",
    "MSC_PREFIX",
    "S3_PREFIX",
    "ObjectBinReader",
    "ObjectInfo",
    "ObjectStorageConfig",
    "ReadStats",
    "RemoteObject",
    "RetryPolicy",
    "S3Config",
    "StorageURL",
    "clear_clients",
    "coerce_config",
    "config_or_default",
    "dataset_exists",
    "default_idx_cache",
    "fetch_index",
    "index_cache_path",
    "is_fresh",
    "is_remote",
    "local_folder_for",
    "open_object",
    "open_remote_dataset",
    "open_remote_pair",
    "parse_url",
    "recorded_infos",
    "remote_object_identity",
    "storage_config_for",
    "upload_dataset",
]
