"""A pair appended to another by :meth:`IndexedDatasetBuilder.add_index` (``tokenloom
merge``): the checks that it can be appended byte for byte, and the copy of its ``.bin``.

* :func:`check_mergeable`: same dtype and modality as the builder, sequences back to
  back, and a ``.bin`` of exactly the size its ``.idx`` describes;
* :func:`copy_bin`: the ``.bin``'s bytes in bounded chunks, reporting progress.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Optional

import numpy
import numpy.typing as npt

from tokenloom.errors import FormatError
from tokenloom.format.index_file import IndexFile
from tokenloom.format.spec import MissingFileError, get_bin_path, sequence_pointers

__all__ = ["check_mergeable", "copy_bin"]

_COPY_CHUNK = 16 << 20


def check_mergeable(
    index: IndexFile, path_prefix: str, dtype: npt.DTypeLike, multimodal: bool
) -> int:
    """The ``.bin`` size in bytes of the pair at ``path_prefix`` (its ``index`` open),
    after checking that a builder of ``dtype`` and ``multimodal`` can append it;
    FormatError (MissingFileError) naming the file and the difference otherwise."""
    theirs, ours = numpy.dtype(index.header.dtype), numpy.dtype(dtype)
    if theirs != ours:
        raise FormatError(
            f"{index.path}: cannot merge: its tokens are {theirs.name}, "
            f"the builder writes {ours.name}"
        )
    if index.header.sequence_count and index.multimodal != multimodal:
        kind = "multimodal" if index.multimodal else "not multimodal"
        raise FormatError(
            f"{index.path}: cannot merge: the dataset is {kind} but the builder "
            f"has multimodal={multimodal}"
        )
    expected = sequence_pointers(index.lengths, theirs.itemsize)
    if not numpy.array_equal(expected, index.pointers):
        raise FormatError(f"{index.path}: cannot merge: sequence pointers are not contiguous")
    nbytes = int(index.lengths.sum(dtype=numpy.int64)) * theirs.itemsize
    bin_path = get_bin_path(path_prefix)
    try:
        size = os.path.getsize(bin_path)
    except FileNotFoundError:
        raise MissingFileError(f"{bin_path}: data file does not exist") from None
    if size != nbytes:
        raise FormatError(
            f"{bin_path}: cannot merge: data file is {size} bytes, its index describes {nbytes}"
        )
    return nbytes


def copy_bin(
    bin_path: str,
    nbytes: int,
    write: Callable[[bytes], None],
    progress: Optional[Callable[[int], None]],
) -> None:
    """Hand the first ``nbytes`` of ``bin_path`` to ``write`` chunk by chunk (and each
    chunk's size to ``progress``); FormatError when the file shrank meanwhile."""
    with open(bin_path, "rb") as source:
        left = nbytes
        while left:
            chunk = source.read(min(_COPY_CHUNK, left))
            if not chunk:
                raise FormatError(f"{bin_path}: data file shrank while it was being merged")
            write(chunk)
            left -= len(chunk)
            if progress is not None:
                progress(len(chunk))
