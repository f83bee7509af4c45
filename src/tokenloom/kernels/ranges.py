"""numba kernels of :func:`tokenloom.index.ranges.sample_ranges` for millions of samples
(``tokenloom trace --manifest``): one pass counts each sample's non-empty document parts,
a second writes the ``(document id, token start, token end)`` rows into the CSR.

Readable twin: :func:`tokenloom.index.ranges.reference_sample_ranges` (one sample at a
time); the numpy path of ``sample_ranges`` is the fallback, and the property tests
compare all three (``tests/index/test_ranges_kernel.py``).
"""

from __future__ import annotations

import numba
import numpy


@numba.njit(cache=True, nogil=True)
def count_parts(
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    rows: numpy.ndarray,
    extra: int,
    counts: numpy.ndarray,
) -> None:
    """``counts[i]``: the non-empty parts of sample-index row ``rows[i]`` (0 for -1)."""
    for i in range(rows.shape[0]):
        j = rows[i]
        count = 0
        if j >= 0:
            first, begin = sample_index[j, 0], numpy.int64(sample_index[j, 1])
            last, stop = sample_index[j + 1, 0], numpy.int64(sample_index[j + 1, 1]) + extra
            for position in range(first, last + 1):
                if position == last:
                    end = stop
                else:
                    end = numpy.int64(lengths[document_index[position]])
                if end > begin:
                    count += 1
                begin = 0  # only the first part starts inside its document
        counts[i] = count


@numba.njit(cache=True, nogil=True)
def fill_parts(
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    rows: numpy.ndarray,
    extra: int,
    offsets: numpy.ndarray,
    out: numpy.ndarray,
) -> None:
    """Write the rows of sample ``i`` into ``out[offsets[i]:offsets[i + 1]]``."""
    for i in range(rows.shape[0]):
        j = rows[i]
        if j < 0:
            continue
        at = offsets[i]
        first, begin = sample_index[j, 0], numpy.int64(sample_index[j, 1])
        last, stop = sample_index[j + 1, 0], numpy.int64(sample_index[j + 1, 1]) + extra
        for position in range(first, last + 1):
            document = numpy.int64(document_index[position])
            end = stop if position == last else numpy.int64(lengths[document])
            if end > begin:
                out[at, 0] = document
                out[at, 1] = begin
                out[at, 2] = end
                at += 1
            begin = 0
