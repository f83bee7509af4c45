"""The low-level dataset under a ``GPTDataset``, as the GPT dataset sees it.

* :func:`open_low_level`: a prefix opened as an ``IndexedDataset`` the way the config
  asks (object storage, mmap, trusted sizes);
* :func:`sequence_count`: what GPT splits by (sequences);
* :func:`checked_indices`: a split's ``indexed_indices``, checked against it;
* :func:`data_identity` and :func:`default_cache_dir`: what identifies its data in the
  index-cache key, and where the indices are cached when the config names no folder.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Optional

import numpy
import numpy.typing as npt

from tokenloom import storage
from tokenloom.attributes import read_attribute
from tokenloom.cache import file_identity
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.errors import ConfigError
from tokenloom.format import IndexedDataset, LazyIndexedDataset

__all__ = [
    "PAIRS",
    "checked_indices",
    "data_identity",
    "default_cache_dir",
    "open_low_level",
    "sequence_count",
]

PAIRS = (IndexedDataset, LazyIndexedDataset)
"""The ``.bin``/``.idx`` datasets: they know their sequence count and file identity."""


def sequence_count(low_level: Any) -> int:
    """The number of sequences (a pair's header count, else ``sequence_lengths``)."""
    if isinstance(low_level, PAIRS):
        return len(low_level)
    return int(low_level.sequence_lengths.shape[0])


def open_low_level(dataset_path: str, config: GPTDatasetConfig) -> IndexedDataset:
    """``dataset_path`` opened as an ``IndexedDataset`` as ``config`` asks."""
    if dataset_path.startswith(("s3://", "msc://")):
        return IndexedDataset(
            dataset_path,
            multimodal=False,
            mmap=config.mmap_bin_files,
            object_storage_config=storage.storage_config_for(config),
        )
    return IndexedDataset(
        dataset_path,
        multimodal=False,
        mmap=config.mmap_bin_files,
        fast_cache_load=config.fast_cache_load,
        sequences_per_dataset=config.sequences_for(dataset_path),
        dtype_code=None,
    )


def checked_indices(low_level: Any, indices: Any) -> npt.NDArray[Any]:
    """``indices`` as a 1-D integer array of sequence ids of ``low_level``; ConfigError
    naming the shape, dtype or range otherwise."""
    array: npt.NDArray[Any] = numpy.asarray(indices)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ConfigError(
            f"indexed_indices must be a 1-D integer array, got "
            f"{array.dtype} with shape {array.shape}"
        )
    count = sequence_count(low_level)
    if array.size:  # the ufuncs' reduce directly: no Python layer of ndarray.min/max
        low, high = int(numpy.minimum.reduce(array)), int(numpy.maximum.reduce(array))
        if low < 0 or high >= count:
            raise ConfigError(
                f"indexed_indices reach [{low}, {high}] but the dataset has {count} sequences"
            )
    return array


def data_identity(low_level: Any) -> Any:
    """What identifies the data in the cache key: a pair's file identity as opened,
    else the dataset's ``unique_identifiers``, else its class and prefix (object
    storage) or the files' identity at ``path_prefix``."""
    if isinstance(low_level, PAIRS):
        identity = low_level.file_identity()  # of the files as opened (or known)
        if identity is not None:
            return identity
    identity = read_attribute(low_level, "unique_identifiers", None)
    if identity is not None:
        return identity
    prefix = read_attribute(low_level, "path_prefix", None)
    if prefix is None or str(prefix).startswith(("s3://", "msc://")):
        return OrderedDict([("class", type(low_level).__name__), ("path_prefix", prefix)])
    return file_identity(prefix)


def default_cache_dir(config: GPTDatasetConfig, low_level: Any, class_name: str) -> Optional[str]:
    """``config.path_to_cache``, else megatron-core's ``PREFIX/cache/CLASS_indices`` (a
    local folder for object storage); None for mock data or a dataset without a prefix."""
    if config.path_to_cache:
        return config.path_to_cache
    prefix = read_attribute(low_level, "path_prefix", None)
    if config.mock or prefix is None:
        return None
    if storage.is_remote(prefix):  # not ./s3:/... (megatron-core's folder)
        prefix = storage.local_folder_for(prefix, config)
    return os.path.join(prefix, "cache", f"{class_name}_indices")
