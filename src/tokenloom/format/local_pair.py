"""Opening a local ``.bin``/``.idx`` pair, and the size checks ``IndexedDataset`` runs.

* :func:`open_local`: the ``.idx`` (validated) and a ``.bin`` reader, under the publish
  read lock;
* :func:`check_bin_size`: the ``.bin`` holds every sequence the ``.idx`` names;
* :func:`check_back_to_back`: the sequences of a slice lie back to back in the ``.bin``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

from tokenloom.errors import FormatError
from tokenloom.format.bin_readers import BinReader, check_local, make_bin_reader
from tokenloom.format.index_file import IndexFile
from tokenloom.format.publish import reading
from tokenloom.format.spec import get_bin_path, get_idx_path

__all__ = ["check_back_to_back", "check_bin_size", "open_local"]


def open_local(
    path_prefix: str,
    multimodal: bool,
    mmap: bool,
    object_storage_config: Any,
    sequences_per_dataset: Optional[tuple[int, int]],
    dtype_code: Optional[int],
    fast_cache_load: bool,
) -> tuple[IndexFile, BinReader]:
    """The ``.idx`` and a ``.bin`` reader of a local pair, opened under the publish
    read lock (never one file of an old pair and one of a new one)."""
    check_local(path_prefix, object_storage_config)  # a URL or a config: a clear error
    idx_path = get_idx_path(path_prefix)
    with reading(path_prefix):  # never one file of an old pair and one of a new one
        index = IndexFile(
            idx_path,
            multimodal,
            sequences_per_dataset,
            dtype_code,
            check_documents=not fast_cache_load,
        )
        try:
            reader = make_bin_reader(get_bin_path(path_prefix), mmap, object_storage_config)
        except BaseException:
            index.close()
            raise
    return index, reader


def check_bin_size(index: IndexFile, reader: BinReader, itemsize: int) -> None:
    """FormatError when the ``.bin`` is shorter than the ``.idx`` says."""
    size = reader.size
    count = index.header.sequence_count
    if size is None or count == 0:
        return
    end = int(index.pointers[-1]) + int(index.lengths[-1]) * itemsize
    if size < end:
        raise FormatError(
            f"{reader.path}: data file is {size} bytes but {index.path} says its last sequence "
            f"ends at byte {end}; the .bin is truncated or belongs to another .idx"
        )


def check_back_to_back(
    prefix: str, pointers: numpy.ndarray, lengths: numpy.ndarray, itemsize: int, start: int
) -> None:
    """FormatError unless the sequences of a slice lie back to back in the ``.bin``
    (a slice is read in one go, so it would disagree with reading item by item)."""
    if pointers.shape[0] < 2:
        return
    steps = lengths[:-1].astype(numpy.int64) * itemsize
    wrong = numpy.flatnonzero(pointers[1:] - pointers[:-1] != steps)
    if wrong.size:
        at = start + int(wrong[0]) + 1
        raise FormatError(
            f"{prefix}.idx: sequence {at} has pointer {int(pointers[wrong[0] + 1])}, but the "
            f"previous sequence ends at byte {int(pointers[wrong[0]] + steps[wrong[0]])}; the "
            "pointers disagree with the lengths, the index file is corrupt (check it with "
            "`tokenloom inspect`)"
        )
