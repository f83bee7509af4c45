"""Megatron's MMIDIDX token format: ``.bin`` (tokens) + ``.idx`` (index), read and written.

Files written here and by megatron-core are interchangeable byte for byte.
"""

from tokenloom.format.bin_readers import (
    BinReader,
    FileBinReader,
    MMapBinReader,
    make_bin_reader,
)
from tokenloom.format.dtypes import DType, optimal_dtype
from tokenloom.format.identity import file_identity
from tokenloom.format.lazy import LazyIndexedDataset, PairFacts
from tokenloom.format.reader import IndexedDataset, IndexOutOfRangeError
from tokenloom.format.spec import (
    INDEX_MAGIC,
    INDEX_VERSION,
    IndexHeader,
    MissingFileError,
    get_bin_path,
    get_idx_path,
    read_index_header,
)
from tokenloom.format.writer import IndexedDatasetBuilder

__all__ = [
    "DType",
    "optimal_dtype",
    "get_idx_path",
    "get_bin_path",
    "read_index_header",
    "IndexHeader",
    "INDEX_MAGIC",
    "INDEX_VERSION",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "LazyIndexedDataset",
    "PairFacts",
    "file_identity",
    "BinReader",
    "MMapBinReader",
    "FileBinReader",
    "make_bin_reader",
    "MissingFileError",
    "IndexOutOfRangeError",
]
