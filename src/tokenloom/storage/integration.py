"""What the dataset layers ask of object storage: the config of a remote prefix, its
local folder for index caches, and opening a pair for ``IndexedDataset``.  The ``.idx``
download of a whole blend under torch.distributed is the builder's
(:mod:`tokenloom.builder.remote_indices`): storage knows nothing of ranks."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.process_caches import register_state
from tokenloom.storage.bin_reader import ObjectBinReader
from tokenloom.storage.config import ObjectStorageConfig, coerce_config
from tokenloom.storage.datasets import config_or_default, open_remote_dataset
from tokenloom.storage.index_cache import index_cache_path

logger = logging.getLogger("tokenloom.storage")


class _Once:
    """Says a thing once per process (bounded: one flag)."""

    def __init__(self) -> None:
        self._done = False
        self._lock = threading.Lock()

    def __call__(self, message: str, *args: object) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        logger.info(message, *args)

    def reset(self) -> None:
        """Say it again next time."""
        with self._lock:
            self._done = False


REMOTE_MMAP_NOTE = _Once()
"""The one INFO line saying that ``mmap=True`` is ignored for remote prefixes."""
register_state(
    REMOTE_MMAP_NOTE,
    "storage.integration: the remote-mmap notice",
    "whether the INFO line on mmap=True for remote prefixes was logged in this process",
    REMOTE_MMAP_NOTE.reset,
)


def open_remote_pair(path_prefix: str, config: Any, mmap: bool) -> tuple[str, ObjectBinReader]:
    """``(local .idx path, .bin reader)`` for ``IndexedDataset``; ``mmap=True`` (the
    default, which object storage cannot honour) picks the remote reader, said once."""
    if mmap:
        REMOTE_MMAP_NOTE(
            "%s: object storage cannot be memory-mapped; reading it by ranged requests "
            "(mmap=True / mmap_bin_files=True is ignored for s3:// and msc:// prefixes)",
            path_prefix,
        )
    return open_remote_dataset(path_prefix, config_or_default(config))


def storage_config_for(dataset_config: Any) -> ObjectStorageConfig:
    """The ObjectStorageConfig of a GPT / blended config: its ``object_storage_config``
    (tokenloom) with ``object_storage_cache_path`` (Megatron) as the ``.idx`` folder."""
    given = read_attribute(dataset_config, "object_storage_config", None)
    folder = read_attribute(dataset_config, "object_storage_cache_path", None)
    if given is not None:
        config = coerce_config(given)
        return dataclasses.replace(config, path_to_idx_cache=folder) if folder else config
    if folder is None:
        raise ConfigError(
            "s3:// and msc:// prefixes need a local folder for their .idx files: "
            "set object_storage_cache_path (or object_storage_config)"
        )
    return ObjectStorageConfig(path_to_idx_cache=folder)


def local_folder_for(path_prefix: str, dataset_config: Any) -> str:
    """The local stand-in of a remote prefix (``<idx cache>/<bucket>/<key>``), under which
    index caches go when ``path_to_cache`` is None (Megatron writes ``./s3:/...``)."""
    return index_cache_path(path_prefix, storage_config_for(dataset_config).path_to_idx_cache)


__all__ = [
    "REMOTE_MMAP_NOTE",
    "open_remote_pair",
    "storage_config_for",
    "local_folder_for",
]
