"""The checks of an ``IndexedDataset`` read, and their errors.

* :func:`sequence_position`: a sequence index (negative counts from the end) checked
  against the number of sequences;
* :func:`checked_span`: ``offset`` and ``length`` of :meth:`IndexedDataset.get` checked
  against the sequence's length;
* :func:`bad_read` / :func:`negative_length`: the errors when the ``.idx`` and the
  ``.bin`` disagree, or the ``.idx`` is corrupt.
"""

from __future__ import annotations

import operator
from typing import Any, Optional

from tokenloom.errors import FormatError

__all__ = [
    "IndexOutOfRangeError",
    "bad_read",
    "checked_span",
    "negative_length",
    "sequence_position",
]


class IndexOutOfRangeError(FormatError, IndexError):
    """A sequence index, offset or length points outside the dataset."""


def _integer(name: str, value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def sequence_position(path_prefix: str, idx: Any, count: int) -> int:
    """``idx`` as a position in ``[0, count)`` (negative: from the end); TypeError for
    a non-integer, IndexOutOfRangeError outside the dataset."""
    try:
        i = operator.index(idx)
    except TypeError:
        raise TypeError(f"sequence index must be an integer, got {type(idx).__name__}") from None
    if i < 0:
        i += count
    if not 0 <= i < count:
        raise IndexOutOfRangeError(
            f"{path_prefix}: sequence index {idx} out of range for {count} sequences"
        )
    return i


def checked_span(
    path_prefix: str, idx: Any, i: int, size: int, offset: Any, length: Any
) -> tuple[int, int]:
    """``(offset, length)`` within sequence ``i`` of ``size`` tokens (``length`` None:
    to its end); IndexOutOfRangeError naming the call when the span reads past it."""
    if size < 0:
        raise negative_length(path_prefix, i, size)
    offset = _integer("offset", offset)
    length = size - offset if length is None else _integer("length", length)
    if offset < 0 or length < 0 or offset + length > size:
        raise IndexOutOfRangeError(
            f"{path_prefix}: get({idx}, offset={offset}, length={length}) reads past "
            f"sequence {i}, which has {size} tokens"
        )
    return offset, length


def bad_read(path_prefix: str, pointer: int, count: int, size: Optional[int]) -> FormatError:
    """``count`` tokens at byte ``pointer`` do not lie in the ``size``-byte ``.bin``."""
    return FormatError(
        f"{path_prefix}.bin: cannot read {count} tokens at byte offset {pointer} of a "
        f"{size}-byte data file; the .idx pointers and the .bin disagree"
    )


def negative_length(path_prefix: str, i: int, size: int) -> FormatError:
    """The ``.idx`` gives sequence ``i`` a negative length."""
    return FormatError(
        f"{path_prefix}.idx: sequence {i} has negative length {size}; "
        "the index file is corrupt: rebuild the .bin/.idx pair"
    )
