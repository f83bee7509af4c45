"""Which document tokens make up each sample: ``(document id, token start, token end)`` rows.

A GPT sample is read from the sample index's rows ``r`` and ``r + 1`` (megatron-core's
``GPTDataset._query_document_sample_shuffle_indices``): from token ``offset[r]`` of
document ``document_index[doc[r]]`` to token ``offset[r + 1] + extra`` of document
``document_index[doc[r + 1]]``, every document in between whole (``extra`` is 1 with
``add_extra_token_to_sequence``). The rows here say exactly that, one per document
part, with token offsets relative to the document and the end exclusive. A part that
holds no token (an empty document) has no row.

Two layouts:

* :func:`sample_ranges` -- CSR: ``offsets`` (``n + 1``) and ``ranges`` (``[m, 3]``), the
  rows of sample ``i`` being ``ranges[offsets[i]:offsets[i + 1]]``. Vectorised numpy, for
  any number of samples at once; from 4,096 samples on (``tokenloom trace`` asks for
  millions) the numba kernels of :mod:`tokenloom.kernels.ranges` when numba runs.
* :func:`padded_ranges` -- ``[n, width, 3]`` padded with ``-1`` plus a count per sample,
  the layout a batch carries (``document_ranges`` / ``document_range_counts``).

:func:`reference_sample_ranges` is the readable twin of :func:`sample_ranges`, one
sample at a time (property-tested equal). Rows of ``-1`` ask for a padding sample:
it has no row (none of its tokens is trained on).

Document ids are the values of ``document_index`` as GPTDataset uses them: it reads
``self.dataset.get(document_index[i], ...)``, so an id is a sequence row of the
low-level ``.idx`` (absolute in the whole file, not relative to the split), and
``lengths`` must be that file's sequence lengths.

Using it (e.g. ``tokenloom trace``):

* a global batch: map its sample positions through the blend (``dataset_index`` /
  ``dataset_sample_index``), then call :func:`sample_ranges` once per contributing
  dataset with ``rows = shuffle_index[dataset_sample_index[...]]``;
* an inverted search (where is document ``d`` trained on?): call it on
  ``rows = shuffle_index[a:b]`` in chunks of a few million, take
  ``hit = numpy.flatnonzero(ranges[:, 0] == d)`` and the owning sample positions
  ``a + numpy.searchsorted(offsets, hit, side="right") - 1``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError
from tokenloom.kernels import KERNELS, read_only

__all__ = [
    "RANGE_FIELDS",
    "blend_sample_ranges",
    "padded_ranges",
    "reference_sample_ranges",
    "sample_ranges",
]

RANGE_FIELDS = ("document_id", "token_start", "token_end")
"""The three columns of a range row (token offsets relative to the document)."""

_KERNEL_FROM = 4096
"""Samples from which :func:`sample_ranges` runs the numba kernels (fewer: numpy's
vectorised path, which needs no compiled kernel loaded)."""


def _rows(rows: Any, count: int) -> numpy.ndarray:
    flat: numpy.ndarray = numpy.asarray(rows, dtype=numpy.int64).reshape(-1)
    bad = (flat < -1) | (flat >= count)
    if bad.any():
        value = int(flat[numpy.flatnonzero(bad)[0]])
        raise ConfigError(
            f"sample index row {value} is outside [0, {count}) (-1 asks for a padding "
            "sample); pass rows of this dataset's sample index (after its shuffle index)"
        )
    return flat


def sample_ranges(
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    rows: Any,
    extra: int,
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(offsets, ranges)`` of the samples at sample-index ``rows`` (CSR, see above).

    Args:
        document_index: the dataset's document index (document ids, epochs concatenated).
        sample_index: its ``[S + 1, 2]`` sample index (document-index position, offset).
        lengths: token count of every document id (the ``.idx`` sequence lengths).
        rows: sample-index rows (``shuffle_index[i]`` for sample ``i``), ``-1`` for a
            padding sample.
        extra: 1 with ``add_extra_token_to_sequence``, else 0.

    Returns:
        ``offsets`` int64 ``[n + 1]`` and ``ranges`` int64 ``[m, 3]``.
    """
    rows = _rows(rows, int(sample_index.shape[0]) - 1)
    fast = KERNELS.get("ranges") if rows.shape[0] >= _KERNEL_FROM else None
    if fast is not None:
        return _fast_ranges(fast, document_index, sample_index, lengths, rows, extra)
    real = rows >= 0
    safe = numpy.where(real, rows, 0)
    first, start = (
        sample_index[safe, 0].astype(numpy.int64),
        sample_index[safe, 1].astype(numpy.int64),
    )
    last = sample_index[safe + 1, 0].astype(numpy.int64)
    stop = sample_index[safe + 1, 1].astype(numpy.int64) + extra
    parts = numpy.where(real, last - first + 1, 0)
    total = int(parts.sum())
    owner = numpy.repeat(numpy.arange(rows.shape[0]), parts)
    begin = numpy.cumsum(parts) - parts
    position = first[owner] + (numpy.arange(total) - begin[owner])
    documents = numpy.asarray(document_index[position], dtype=numpy.int64)
    ranges = numpy.empty((total, 3), dtype=numpy.int64)
    ranges[:, 0] = documents
    ranges[:, 1] = numpy.where(position == first[owner], start[owner], 0)
    ends = numpy.asarray(lengths[documents], dtype=numpy.int64)
    ranges[:, 2] = numpy.where(position == last[owner], stop[owner], ends)
    keep = ranges[:, 2] > ranges[:, 1]
    if not keep.all():
        ranges, owner = ranges[keep], owner[keep]
    offsets = numpy.zeros(rows.shape[0] + 1, dtype=numpy.int64)
    numpy.cumsum(numpy.bincount(owner, minlength=rows.shape[0]), out=offsets[1:])
    return offsets, ranges


def _fast_ranges(
    fast: Any,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    rows: numpy.ndarray,
    extra: int,
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """:func:`sample_ranges` by the numba kernels (count, then fill)."""
    arrays = _kernel_arrays(document_index, sample_index, lengths)
    counts = numpy.empty(rows.shape[0], dtype=numpy.int64)
    fast.count_parts(*arrays, read_only(rows), int(extra), counts)
    offsets = numpy.zeros(rows.shape[0] + 1, dtype=numpy.int64)
    numpy.cumsum(counts, out=offsets[1:])
    ranges = numpy.empty((int(offsets[-1]), 3), dtype=numpy.int64)
    fast.fill_parts(*arrays, read_only(rows), int(extra), offsets, ranges)
    return offsets, ranges


def _kernel_arrays(*arrays: Any) -> list[numpy.ndarray]:
    return [read_only(numpy.asarray(a)) for a in arrays]


def blend_sample_ranges(
    sources: list[tuple[Any, Any, Any, int]], ids: Any, rows: Any
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """CSR ``(offsets, ranges)`` of samples drawn from several datasets, in their order:
    sample ``i`` is sample-index row ``rows[i]`` of ``sources[ids[i]]``, a
    ``(document_index, sample_index, lengths, extra)`` tuple. Equal to concatenating
    :func:`sample_ranges` of each sample; the kernels write each source's rows straight
    into their places (no reordering pass)."""
    ids = numpy.asarray(ids, dtype=numpy.int64)
    rows = numpy.asarray(rows, dtype=numpy.int64)
    fast = KERNELS.get("ranges") if rows.shape[0] >= _KERNEL_FROM else None
    if fast is None:
        return _blend_by_numpy(sources, ids, rows)
    picked = [numpy.flatnonzero(ids == k) for k in range(len(sources))]
    counts = numpy.zeros(rows.shape[0], dtype=numpy.int64)
    calls = []
    for (document_index, sample_index, lengths, extra), where in zip(sources, picked):
        own = read_only(_rows(rows[where], int(sample_index.shape[0]) - 1))
        arrays = _kernel_arrays(document_index, sample_index, lengths)
        own_counts = numpy.empty(own.shape[0], dtype=numpy.int64)
        fast.count_parts(*arrays, own, int(extra), own_counts)
        counts[where] = own_counts
        calls.append((arrays, own, int(extra), where))
    offsets = numpy.zeros(rows.shape[0] + 1, dtype=numpy.int64)
    numpy.cumsum(counts, out=offsets[1:])
    ranges = numpy.empty((int(offsets[-1]), 3), dtype=numpy.int64)
    for arrays, own, extra, where in calls:
        fast.fill_parts(*arrays, own, extra, offsets[where], ranges)
    return offsets, ranges


def _blend_by_numpy(
    sources: list[tuple[Any, Any, Any, int]], ids: numpy.ndarray, rows: numpy.ndarray
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """:func:`blend_sample_ranges` by :func:`sample_ranges` per source, then reordered."""
    counts = numpy.zeros(rows.shape[0], dtype=numpy.int64)
    pieces = []
    for k, (document_index, sample_index, lengths, extra) in enumerate(sources):
        where = numpy.flatnonzero(ids == k)
        own_offsets, own_ranges = sample_ranges(
            document_index, sample_index, lengths, rows[where], extra
        )
        counts[where] = numpy.diff(own_offsets)
        pieces.append((where, own_offsets, own_ranges))
    offsets = numpy.zeros(rows.shape[0] + 1, dtype=numpy.int64)
    numpy.cumsum(counts, out=offsets[1:])
    ranges = numpy.empty((int(offsets[-1]), 3), dtype=numpy.int64)
    for where, own_offsets, own_ranges in pieces:
        sizes = numpy.diff(own_offsets)
        rank = numpy.arange(own_ranges.shape[0]) - numpy.repeat(own_offsets[:-1], sizes)
        ranges[offsets[numpy.repeat(where, sizes)] + rank] = own_ranges
    return offsets, ranges


def reference_sample_ranges(
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    row: int,
    extra: int,
) -> numpy.ndarray:
    """The ``[k, 3]`` rows of one sample (sample-index ``row``; ``-1``: padding), read the
    way megatron-core reads the sample's tokens: the readable twin of :func:`sample_ranges`."""
    if row < 0:
        return numpy.zeros((0, 3), dtype=numpy.int64)
    first, start = int(sample_index[row][0]), int(sample_index[row][1])
    last, stop = int(sample_index[row + 1][0]), int(sample_index[row + 1][1]) + extra
    found = []
    for position in range(first, last + 1):
        document = int(document_index[position])
        begin = start if position == first else 0
        end = stop if position == last else int(lengths[document])
        if end > begin:
            found.append((document, begin, end))
    return numpy.array(found, dtype=numpy.int64).reshape(-1, 3)


def padded_ranges(
    offsets: numpy.ndarray, ranges: numpy.ndarray, width: Optional[int] = None
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """CSR rows as ``([n, width, 3] int64 padded with -1, [n] int64 counts)``.

    ``width`` defaults to the largest count (at least 1, so that the array is never
    empty in its middle axis)."""
    counts = numpy.diff(offsets)
    n = counts.shape[0]
    widest = int(counts.max()) if n else 0
    width = max(1, widest) if width is None else width
    if widest > width:
        raise ConfigError(f"a sample has {widest} document ranges, more than width={width}")
    out = numpy.full((n, width, 3), -1, dtype=numpy.int64)
    if ranges.shape[0]:
        owner = numpy.repeat(numpy.arange(n), counts)
        slot = numpy.arange(ranges.shape[0]) - offsets[:-1][owner]
        out[owner, slot] = ranges
    return out, counts
