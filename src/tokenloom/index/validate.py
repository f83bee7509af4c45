"""The one validator of sample positions and of index arrays.

* :func:`sample_position` and :func:`sample_rows`: the ``idx`` of ``dataset[idx]`` and
  the indices of ``get_batch`` (integers only, negative from the end, range checked).
* :func:`check_gpt_indices`: the document, sample and shuffle indices of a GPT dataset
  against the dataset's real bounds, before any kernel reads through them. Arrays from
  a cache entry may be wrong although their checksums are valid (written by hand, or
  by a bug in an older version); after this check every read the sample paths make
  through them stays inside the documents they name, and every sample has exactly
  ``sequence_length + extra`` tokens (the last one may be shorter).
* :func:`check_blended_indices`: the two indices of a blended dataset.

The array checks are vectorised (min/max, monotonicity, one gather and one cumulative
sum over the document index); their cost is in ``BENCHMARKS.md``. They raise
:class:`~tokenloom.errors.CacheError` naming ``where`` (the cache entry), the array,
the position and the value.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.errors import CacheError, SampleIndexError

__all__ = ["check_blended_indices", "check_gpt_indices", "sample_position", "sample_rows"]


def sample_position(idx: Any, count: int, what: str = "samples") -> int:
    """``idx`` (an integer; negative counts from the end) as a position in ``[0, count)``.

    Raises:
        TypeError: ``idx`` is not an integer (``int()`` would turn ``1.7`` or ``"1"``
            into a sample silently).
        SampleIndexError: ``idx`` is outside ``[-count, count)`` (an IndexError).
    """
    try:
        k = operator.index(idx)
    except TypeError:
        raise TypeError(f"sample index must be an integer or None, got {idx!r}") from None
    if k < 0:
        k += count
    if not 0 <= k < count:
        raise SampleIndexError(
            f"sample index {idx} out of range for {count} {what}: give an "
            f"integer in [{-count}, {count}) or None (a padding sample)"
        )
    return k


def sample_rows(
    indices: Sequence[Optional[int]], count: int, what: str = "samples"
) -> numpy.ndarray:
    """Positions of ``indices`` in ``[0, count)`` as int64, ``-1`` for ``None``
    (a padding sample); same errors as :func:`sample_position`."""
    rows = numpy.empty(len(indices), dtype=numpy.int64)
    for b, idx in enumerate(indices):
        if idx is None:
            rows[b] = -1
        elif type(idx) is int and 0 <= idx < count:  # the common case, inline
            rows[b] = idx
        else:
            rows[b] = sample_position(idx, count, what)
    return rows


def _fail(where: str, array: str, position: int, value: Any, rule: str) -> CacheError:
    return CacheError(
        f"{where}: {array}[{position}] = {value} {rule}; the index cache does not belong "
        "to this dataset or is corrupt: delete it (it is rebuilt) or rebuild the cache"
    )


def _int_array(where: str, name: str, values: Any, ndim: int) -> numpy.ndarray:
    array: numpy.ndarray = numpy.asarray(values)
    if array.ndim != ndim or array.dtype.kind not in "iu" or (ndim == 2 and array.shape[1] != 2):
        raise CacheError(
            f"{where}: {name} has dtype {array.dtype} and shape {array.shape}; "
            f"expected {'[n, 2]' if ndim == 2 else '1-D'} integers: delete the "
            "index cache (it is rebuilt)"
        )
    return array


def _check_range(where: str, name: str, array: numpy.ndarray, high: int, rule: str) -> None:
    """Every value of ``array`` in ``[0, high)``."""
    if array.size == 0:
        return
    low, top = int(array.min()), int(array.max())
    if low < 0 or top >= high:
        position = int(numpy.argmin(array)) if low < 0 else int(numpy.argmax(array))
        raise _fail(where, name, position, low if low < 0 else top, rule)


def _shuffle_array(where: str, shuffle_index: Any) -> Any:
    """``shuffle_index`` as a 1-D integer array, or itself when it is a
    :class:`~tokenloom.index.bijection.BijectionShuffle` (never materialised)."""
    from tokenloom.index.bijection import BijectionShuffle

    if isinstance(shuffle_index, BijectionShuffle):
        return shuffle_index
    return _int_array(where, "shuffle_index", shuffle_index, 1)


def _check_shuffle_range(where: str, shuffle: Any, rows: int) -> None:
    """Every value of ``shuffle`` a row of the sample index (a bijection shuffle is a
    permutation of ``[0, rows)`` by construction: nothing to check)."""
    if isinstance(shuffle, numpy.ndarray):
        rule = f"is not one of the {rows} rows of sample_index"
        _check_range(where, "shuffle_index", shuffle, rows, rule)


def check_gpt_indices(
    document_index: Any,
    sample_index: Any,
    shuffle_index: Any,
    sequence_lengths: Any,
    sequence_length: int,
    extra: int,
    num_samples: int,
    where: str,
) -> None:
    """Check a GPT dataset's three indices against its documents.

    Args:
        document_index, sample_index, shuffle_index: the arrays (any integer dtypes).
        sequence_lengths: token count of every document of the low-level dataset.
        sequence_length, extra: tokens per sample and ``add_extra_token_to_sequence``.
        num_samples: ``len(dataset)``; ``shuffle_index`` must hold exactly that many.
        where: names the source of the arrays in the error (e.g. the cache entry).

    Raises:
        CacheError: a value outside its bounds, rows of ``sample_index`` out of
            order or outside their document, or samples of the wrong length.
    """
    documents = _int_array(where, "document_index", document_index, 1)
    samples = _int_array(where, "sample_index", sample_index, 2)
    shuffle = _shuffle_array(where, shuffle_index)
    lengths = numpy.asarray(sequence_lengths)
    if shuffle.shape[0] != num_samples or max(samples.shape[0], 1) != num_samples + 1:
        # every sample of sample_index is shuffled exactly once (megatron-core's invariant)
        raise CacheError(
            f"{where}: shuffle_index holds {shuffle.shape[0]} samples and "
            f"sample_index {samples.shape[0]} rows, but the dataset has "
            f"{num_samples} samples: delete the index cache (it is rebuilt)"
        )
    _check_range(
        where,
        "document_index",
        documents,
        lengths.shape[0],
        f"is not one of the {lengths.shape[0]} documents",
    )
    _check_shuffle_range(where, shuffle, samples.shape[0] - 1)
    if samples.shape[0]:
        _check_sample_rows(where, samples, documents, lengths, sequence_length, extra)


def _check_sample_rows(
    where: str,
    samples: numpy.ndarray,
    documents: numpy.ndarray,
    lengths: numpy.ndarray,
    sequence_length: int,
    extra: int,
) -> None:
    """Rows in order, inside their documents, ``sequence_length`` tokens apart."""
    positions = samples[:, 0].astype(numpy.int64)
    offsets = samples[:, 1].astype(numpy.int64)
    _check_range(
        where,
        "sample_index[:, 0]",
        positions,
        documents.shape[0],
        f"is not a position of the {documents.shape[0]}-entry document_index",
    )
    step = numpy.diff(positions)
    backwards = numpy.flatnonzero((step < 0) | ((step == 0) & (numpy.diff(offsets) < 0)))
    if backwards.size:
        row = int(backwards[0]) + 1
        raise _fail(
            where, "sample_index", row, samples[row].tolist(), "comes before the row above it"
        )
    room = lengths[documents[positions]].astype(numpy.int64) - offsets
    room[1:] -= extra  # a sample reads ``extra`` tokens past the row where it ends
    outside = numpy.flatnonzero((offsets < 0) | (room < 0))
    if outside.size:
        row = int(outside[0])
        raise _fail(
            where, "sample_index", row, samples[row].tolist(), "points outside its document"
        )
    tokens = numpy.diff(_stream_positions(positions, offsets, lengths, documents))
    wrong = numpy.flatnonzero(tokens > sequence_length)
    short = numpy.flatnonzero(tokens < sequence_length)
    if short.size:  # only the end may be short: one partial sample, then (megatron's
        first = int(short[0])  # float32 overcount) empty ones repeating its end
        wrong = numpy.union1d(wrong, numpy.flatnonzero(tokens[first + 1 :]) + first + 1)
    if wrong.size:
        row = int(wrong[0])
        raise _fail(
            where,
            "sample_index",
            row + 1,
            samples[row + 1].tolist(),
            f"ends a sample of {int(tokens[row])} tokens, not {sequence_length}",
        )


_CHUNK = 1 << 22


def _stream_positions(
    positions: numpy.ndarray,
    offsets: numpy.ndarray,
    lengths: numpy.ndarray,
    documents: numpy.ndarray,
) -> numpy.ndarray:
    """Token position of every row in the concatenated documents (``positions`` sorted),
    by a running sum over chunks of the document index (bounded memory)."""
    out = numpy.empty(positions.shape[0], dtype=numpy.int64)
    last = int(positions[-1])
    carry = 0
    for begin in range(0, last + 1, _CHUNK):
        end = min(begin + _CHUNK, last)
        starts = numpy.zeros(end - begin + 1, dtype=numpy.int64)
        numpy.cumsum(lengths[documents[begin:end]], dtype=numpy.int64, out=starts[1:])
        low, high = numpy.searchsorted(positions, [begin, begin + _CHUNK])
        out[low:high] = carry + starts[positions[low:high] - begin] + offsets[low:high]
        carry += int(starts[-1])
    return out


def check_blended_indices(
    dataset_index: Any,
    dataset_sample_index: Any,
    dataset_lengths: Sequence[int],
    size: int,
    where: str,
) -> None:
    """``dataset_index`` names one of the datasets, ``dataset_sample_index`` one of its
    samples, and both hold ``size`` entries; raises CacheError otherwise."""
    ids = _int_array(where, "dataset_index", dataset_index, 1)
    rows = _int_array(where, "dataset_sample_index", dataset_sample_index, 1)
    if ids.shape[0] != size or rows.shape[0] != size:
        raise CacheError(
            f"{where}: the indices hold {ids.shape[0]} and {rows.shape[0]} "
            f"entries, but the blend has {size}: delete the index cache"
        )
    lengths = numpy.asarray(dataset_lengths, dtype=numpy.int64)
    _check_range(
        where,
        "dataset_index",
        ids,
        lengths.shape[0],
        f"is not one of the {lengths.shape[0]} blended datasets",
    )
    if size:
        beyond = numpy.flatnonzero((rows < 0) | (rows >= lengths[ids]))
        if beyond.size:
            k = int(beyond[0])
            raise _fail(
                where,
                "dataset_sample_index",
                k,
                int(rows[k]),
                f"is not one of the {int(lengths[ids[k]])} samples of dataset {int(ids[k])}",
            )
