"""Source attribution of GPT samples and batches (``return_document_ranges``).

The ranges come from the dataset's index arrays alone (:mod:`tokenloom.index.ranges`),
never from the tokens: they describe exactly the document parts a sample is read from
(for a subclass that overrides ``_query_document_sample_shuffle_indices``, the parts
its indices name). In ``get_batch`` the batch kernel writes them in the same pass that
copies the tokens (:data:`Attribution`), so that attribution costs next to
nothing; the readable path computes the same with :func:`ranges_of_positions`.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.index.ranges import padded_ranges, sample_ranges

__all__ = [
    "NO_ATTRIBUTION",
    "Attribution",
    "AttributionPool",
    "fill_reference",
    "new_attribution",
    "range_width",
    "ranges_of_positions",
    "wants_ranges",
]

NO_ATTRIBUTION = (
    numpy.zeros((0, 0, 3), dtype=numpy.int64),
    numpy.zeros(0, dtype=numpy.int64),
    numpy.zeros(1, dtype=numpy.int64),
    0,
)
"""The batch kernel's attribution arguments when none is asked (empty: skipped)."""


def wants_ranges(config: Any) -> bool:
    """Whether ``config`` asks for ``document_ranges`` (``return_document_ranges``)."""
    return bool(read_attribute(config, "return_document_ranges", False))


def ranges_of_positions(
    dataset: Any, positions: numpy.ndarray
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """CSR ``(offsets, ranges)`` of GPT dataset samples ``positions`` (int64 in
    ``[0, len(dataset))``, ``-1`` for a padding sample: no rows)."""
    arrays = dataset.cached_indices.arrays()
    rows = arrays["shuffle_index"][numpy.maximum(positions, 0)].astype(numpy.int64)
    rows[positions < 0] = -1
    source, _ = dataset.sampler()
    extra = int(dataset.config.add_extra_token_to_sequence)
    return sample_ranges(
        arrays["document_index"], arrays["sample_index"], source.lengths, rows, extra
    )


def range_width(sample_index: numpy.ndarray) -> int:
    """The most document parts any sample of this sample index spans (at least 1): the
    width of a GPT dataset's batch ``document_ranges``, the same for all its batches (a
    blend's batch takes the widest of its contributing datasets). The batch kernel
    writes at most this many rows per sample, and no sample of these indices has more."""
    if sample_index.shape[0] < 2:
        return 1
    starts = sample_index[:, 0].astype(numpy.int64)
    return max(1, int((starts[1:] - starts[:-1]).max()) + 1)


Attribution = tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]
"""The attribution outputs of one ``get_batch`` call, filled dataset by dataset:
``(ranges, counts, tokens)``. ``ranges`` ``[B, width, 3]`` int64 (rows ``(document id,
token start, token end)``, padded with -1), ``counts`` ``[B]`` int64 (rows of each
sample; 0 for a padding sample), ``tokens`` ``[sources]`` int64 (loss-bearing tokens of
each dataset id). A plain tuple, made by :func:`new_attribution`: it is made on every
``get_batch`` call, where an object with methods cost a measurable part of the call."""


_INT64 = numpy.dtype(numpy.int64)  # a dtype instance: numpy.empty converts no type


def new_attribution(batch: int, width: int, sources: int) -> Attribution:
    """Fresh outputs for ``batch`` samples of at most ``width`` rows and ``sources``
    dataset ids (every ``ranges`` and ``counts`` row is written by the kernel or by
    :func:`fill_reference`, padding included; ``tokens`` starts at zero)."""
    return (
        numpy.empty((batch, width, 3), _INT64),
        numpy.empty(batch, _INT64),
        numpy.zeros(sources, _INT64),
    )


class AttributionPool:
    """The :data:`Attribution` arrays of one dataset's ``get_batch``, reused by a later
    call of the same shape once nothing else refers to them.

    ``get_batch`` runs once per micro-batch, and three fresh arrays were most of what
    attribution cost a call. Reuse is safe by reference count (as in the loader's
    ``BufferPool``): a batch dict holding an array, every view of it and a
    ``torch.from_numpy`` of it keep it referenced, so an array that only this pool
    holds cannot be seen by anyone; the kernel (or :func:`fill_reference`) rewrites
    every ``ranges``/``counts`` row of a batch, and ``tokens`` is zeroed here. An entry
    is popped while in use (two threads never share one); at most :attr:`LIMIT` shapes
    are kept; a pickled copy (a DataLoader worker) starts empty. A caller that keeps
    every batch gets fresh arrays on every call, as without the pool."""

    __slots__ = ("_free",)

    LIMIT = 8

    def __init__(self) -> None:
        self._free: dict[tuple[int, int, int], Attribution] = {}

    def take(self, batch: int, width: int, sources: int) -> Attribution:
        """Outputs for ``batch`` samples of at most ``width`` rows and ``sources`` ids,
        as :func:`new_attribution` makes them."""
        key = (batch, width, sources)
        free = self._free
        held = free.pop(key, None)  # one C call: atomic under the GIL
        if (
            held is not None
            # references: ``held`` (the tuple) or the tuple (its arrays), and
            # getrefcount's argument: nothing else
            and sys.getrefcount(held) <= 2
            and sys.getrefcount(held[0]) <= 2
            and sys.getrefcount(held[1]) <= 2
            and sys.getrefcount(held[2]) <= 2
        ):
            held[2].fill(0)
        else:
            held = new_attribution(batch, width, sources)
        if len(free) >= self.LIMIT:
            free.clear()
        free[key] = held
        return held

    def __reduce__(self) -> tuple[type[AttributionPool], tuple[()]]:
        return (AttributionPool, ())  # pickled (a DataLoader worker): an empty pool


def fill_reference(
    attribution: Attribution,
    dataset: Any,
    positions: numpy.ndarray,
    dest: numpy.ndarray,
    loss_mask: numpy.ndarray,
    source: int,
) -> None:
    """What the kernel writes into ``attribution``, by the readable path (after the rows
    were filled)."""
    ranges, counts, tokens = attribution
    offsets, rows = ranges_of_positions(dataset, positions)
    padded, row_counts = padded_ranges(offsets, rows, ranges.shape[1])
    ranges[dest], counts[dest] = padded, row_counts
    real = dest[positions >= 0]
    tokens[source] += int(numpy.count_nonzero(loss_mask[real]))
