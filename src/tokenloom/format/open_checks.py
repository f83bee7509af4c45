"""Checks run when a ``.bin``/``.idx`` pair is opened: vectorised, bounded memory.

* :func:`check_sequence_pointers`: every writer (megatron-core's and tokenloom's) stores
  sequences back to back, so pointer ``i`` must be the running sum of the lengths before
  it times the item size.  Overlapping or shifted pointers (``pointer[5] ==
  pointer[4]``) would silently serve another sequence's tokens.  Cost: one chunked
  ``cumsum`` and compare, about 0.3 s per 100 million sequences on one core
  (docs/reliability.md); skipped with ``fast_cache_load=True``.
* :func:`warn_on_suspicious_extent`: a ``.bin`` larger than the index's extent is allowed
  (megatron-core allows it), but one exactly 2, 4 or 8 times as large is what a dtype
  code rewritten to a narrower type looks like, so it warns.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Optional

import numpy

from tokenloom.errors import FormatError

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22  # sequences per step: 32 MiB of int64 scratch
_DTYPE_RATIOS = (2, 4, 8)  # itemsize ratios between the format's dtypes (1, 2, 4, 8 bytes)


class SuspiciousDataFileWarning(UserWarning):
    """A ``.bin`` whose size suggests that the ``.idx`` dtype code is wrong."""


def _pointer_error(
    path: str,
    at: int,
    found: int,
    expected: int,
    itemsize: int,
    previous_length: Optional[int] = None,
) -> FormatError:
    before = (
        "no sequence comes before it, so it must be 0"
        if at == 0
        else f"sequence {at - 1} (length {previous_length}) ends at byte {expected}"
    )
    return FormatError(
        f"{path}: sequence {at} has pointer {found}, but {before} "
        f"({itemsize}-byte tokens stored back to back, as every writer stores "
        "them); the pointers disagree with the lengths (they overlap or leave gaps): the index is "
        "corrupt, rebuild the pair "
        "(`tokenloom inspect` lists every problem)"
    )


def check_sequence_pointers(
    lengths: numpy.ndarray, pointers: numpy.ndarray, itemsize: int, path: str
) -> None:
    """FormatError naming the first sequence whose pointer is not the running sum."""
    count = lengths.shape[0]
    if count == 0:
        return
    if int(pointers[0]) != 0:
        raise _pointer_error(path, 0, int(pointers[0]), 0, itemsize)
    scratch = numpy.empty(min(count, _CHUNK), dtype=numpy.int64)
    carry = 0
    for start in range(0, count, _CHUNK):
        stop = min(start + _CHUNK, count)
        if int(lengths[start:stop].min()) < 0:
            at = start + int(numpy.argmin(lengths[start:stop] >= 0))
            raise FormatError(
                f"{path}: sequence {at} has negative length {int(lengths[at])}; "
                "the index file is corrupt: rebuild the .bin/.idx pair"
            )
        ends = scratch[: stop - start]
        numpy.cumsum(lengths[start:stop], dtype=numpy.int64, out=ends)
        ends *= itemsize
        ends += carry  # ends[i]: where sequence start + i ends = pointer of the next one
        carry = int(ends[-1])
        compared = ends[: stop - start - (1 if stop == count else 0)]
        wrong = numpy.flatnonzero(compared != pointers[start + 1 : start + 1 + compared.shape[0]])
        if wrong.size:
            at = start + 1 + int(wrong[0])
            raise _pointer_error(
                path, at, int(pointers[at]), int(compared[wrong[0]]), itemsize, int(lengths[at - 1])
            )


def warn_on_suspicious_extent(bin_path: str, bin_size: int, extent: int, itemsize: int) -> None:
    """Warn when the ``.bin`` is exactly 2, 4 or 8 times the index's extent.

    The rule (measured on random and real corpora, docs/reliability.md): an honest extra
    tail (an appended or reused file) is an exact multiple of the extent only by chance,
    while a wrong dtype code always gives one of these ratios."""
    if extent <= 0 or bin_size <= extent or bin_size % extent:
        return
    ratio = bin_size // extent
    if ratio in _DTYPE_RATIOS and itemsize * ratio <= 8:
        message = (
            f"{bin_path}: the data file is exactly {ratio}x the {extent} bytes its index "
            f"describes; the .idx dtype code ({itemsize}-byte tokens) is probably wrong "
            f"(the tokens may be {itemsize * ratio}-byte), so samples would be garbage. "
            "Check it with `tokenloom inspect --vocab-size N`"
        )
        warnings.warn(message, SuspiciousDataFileWarning, stacklevel=3)


def run_open_checks(
    index: Any, bin_size: Optional[int], bin_path: str, itemsize: int, trust_index: bool
) -> None:
    """What :class:`~tokenloom.format.IndexedDataset` checks at open (after the size check):
    the pointers (unless ``trust_index``, i.e. ``fast_cache_load``) and the extent."""
    if not trust_index:
        check_sequence_pointers(index.lengths, index.pointers, itemsize, index.path)
    count = index.lengths.shape[0]
    if bin_size is not None and count:
        extent = int(index.pointers[-1]) + int(index.lengths[-1]) * itemsize
        warn_on_suspicious_extent(bin_path, int(bin_size), extent, itemsize)


__all__ = [
    "run_open_checks",
    "check_sequence_pointers",
    "warn_on_suspicious_extent",
    "SuspiciousDataFileWarning",
]
