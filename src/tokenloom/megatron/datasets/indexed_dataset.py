"""``megatron.core.datasets.indexed_dataset``: the MMIDIDX pair, Megatron's names.

``IndexedDataset``, ``IndexedDatasetBuilder`` and ``DType`` are tokenloom's own classes
(Megatron's bytes, arguments and methods, plus ``index``, ``initialize`` and the bin
readers); the private names megatron-core's tools and tests use are here too:
``_IndexReader`` / ``_IndexWriter`` (an ``.idx`` read or written on its own) and the bin
readers ``_MMapBinReader``, ``_FileBinReader``, ``_S3BinReader``,
``_MultiStorageClientBinReader`` (the classes ``IndexedDataset.bin_reader`` is an
instance of).
"""

from __future__ import annotations

import logging
import os
from types import MappingProxyType, TracebackType
from typing import Any, Optional

import numpy

from tokenloom.atomic import atomic_open
from tokenloom.format import (
    DType,
    IndexedDataset,
    IndexedDatasetBuilder,
    get_bin_path,
    get_idx_path,
)
from tokenloom.format.bin_readers import BinReader as _BinReader
from tokenloom.format.bin_readers import FileBinReader as _FileBinReader
from tokenloom.format.bin_readers import MMapBinReader as _MMapBinReader
from tokenloom.format.index_file import IndexFile
from tokenloom.format.index_view import IndexView
from tokenloom.format.spec import write_index
from tokenloom.megatron.datasets.object_storage_utils import (
    ObjectStorageConfig,
    S3Config,
    cache_index_file,
    dataset_exists,
    get_index_cache_path,
    get_object_storage_access,
    is_object_storage_path,
    parse_s3_path,
)
from tokenloom.megatron.datasets.utils import log_single_rank
from tokenloom.storage.bin_reader import MSCBinReader as _MultiStorageClientBinReader
from tokenloom.storage.bin_reader import S3BinReader as _S3BinReader

__all__ = [
    "DType",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "MultiStorageClientFeature",  # noqa: F822 - module __getattr__
    "OBJECT_STORAGE_BIN_READERS",
    "ObjectStorageConfig",
    "S3Config",
    "_BinReader",
    "_FileBinReader",
    "_IndexReader",
    "_IndexWriter",
    "_MMapBinReader",
    "_MultiStorageClientBinReader",
    "_S3BinReader",
    "cache_index_file",
    "dataset_exists",
    "get_bin_path",
    "get_idx_path",
    "get_index_cache_path",
    "get_object_storage_access",
    "is_object_storage_path",
    "log_single_rank",
    "parse_s3_path",
]

logger = logging.getLogger(__name__)

_INDEX_HEADER = b"MMIDIDX\x00\x00"

OBJECT_STORAGE_BIN_READERS = MappingProxyType(
    {"s3": _S3BinReader, "msc": _MultiStorageClientBinReader}
)
"""The bin reader class of each object storage access (``get_object_storage_access``);
read-only."""


class _IndexReader(IndexView):
    """An ``.idx`` opened on its own (megatron-core's ``_IndexReader``).

    Args:
        idx_path: the ``.idx`` file.
        multimodal: whether it carries sequence modes.
        sequences_per_dataset: ``(sequence_count, document_count)`` to check the header against.
        dtype_code: the expected dtype code.
    """

    def __init__(
        self,
        idx_path: str,
        multimodal: bool,
        sequences_per_dataset: Optional[tuple[int, int]] = None,
        dtype_code: Optional[int] = None,
    ) -> None:
        super().__init__(
            IndexFile(os.fspath(idx_path), bool(multimodal), sequences_per_dataset, dtype_code)
        )


class _IndexWriter:
    """Writes an ``.idx`` (megatron-core's ``_IndexWriter``): ``with _IndexWriter(path,
    dtype) as w: w.write(sequence_lengths, sequence_modes, document_indices)``. The file
    appears whole at ``idx_path`` when the block ends without an error."""

    def __init__(self, idx_path: str, dtype: Any) -> None:
        self.idx_path = os.fspath(idx_path)
        self.dtype = dtype
        self._context: Any = None
        self._handle: Any = None

    def __enter__(self) -> _IndexWriter:
        self._context = atomic_open(self.idx_path, "wb")
        self._handle = self._context.__enter__()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_val: Optional[BaseException],
        exc_tb: Optional[TracebackType],
    ) -> Optional[bool]:
        context, self._context, self._handle = self._context, None, None
        return context.__exit__(exc_type, exc_val, exc_tb)

    def write(
        self,
        sequence_lengths: list[int],
        sequence_modes: Optional[list[int]],
        document_indices: list[int],
    ) -> None:
        """Write the whole index (header, lengths, pointers, documents, modes)."""
        write_index(
            self._handle,
            self.dtype,
            numpy.asarray(sequence_lengths, dtype=numpy.int32),
            numpy.asarray(document_indices, dtype=numpy.int64),
            None if sequence_modes is None else numpy.asarray(sequence_modes, dtype=numpy.int8),
        )


def __getattr__(name: str) -> Any:
    """``MultiStorageClientFeature`` (see object_storage_utils)."""
    if name == "MultiStorageClientFeature":
        from tokenloom.megatron.datasets import object_storage_utils

        return object_storage_utils.MultiStorageClientFeature
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
