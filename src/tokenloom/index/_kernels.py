"""numba-compiled GPT index kernels and the simple greedy blending scan.

Imported only through :func:`tokenloom.index._jit.kernels`; it needs numba.  Every
function here has a readable twin in :mod:`tokenloom.index.reference`.
"""

from __future__ import annotations

import numba
import numpy

#: status codes returned by :func:`sample_index`
OK, OUT_OF_DOCUMENTS, NEGATIVE_OFFSET = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def document_tokens(sizes, documents):  # pragma: no cover - compiled
    """sum(sizes[documents]) as int64."""
    total = 0
    for i in range(documents.shape[0]):
        total += sizes[documents[i]]
    return total


@numba.njit(cache=True, nogil=True)
def sample_index(sizes, documents, sequence_length, extra, out):  # pragma: no cover
    """Fill ``out[k] = (position, offset)`` where sample k starts; returns a status."""
    num_samples = out.shape[0] - 1
    last = documents.shape[0] - 1
    position = 0
    offset = 0
    out[0, 0] = 0
    out[0, 1] = 0
    for k in range(1, num_samples + 1):
        needed = sequence_length + extra
        while True:
            length = numpy.int64(sizes[documents[position]])
            available = length - offset
            if available >= needed:
                offset += needed - extra
                break
            needed -= available
            if position == last:
                if k != num_samples:
                    return OUT_OF_DOCUMENTS
                offset = length - extra
                break
            position += 1
            offset = 0
        if offset < 0:
            return NEGATIVE_OFFSET
        out[k, 0] = position
        out[k, 1] = offset
    return OK


@numba.njit(cache=True, nogil=True)
def blend_scan(weights, dataset_index, dataset_sample_index):  # pragma: no cover
    """The plain O(samples x datasets) greedy, exactly as helpers.cpp loops."""
    n = weights.shape[0]
    counts = numpy.zeros(n, dtype=numpy.int64)
    for t in range(dataset_index.shape[0]):
        s = max(numpy.float64(t), 1.0)
        best = 0
        best_error = weights[0] * s - numpy.float64(counts[0])
        for i in range(1, n):
            error = weights[i] * s - numpy.float64(counts[i])
            if error > best_error:
                best_error = error
                best = i
        dataset_index[t] = best
        dataset_sample_index[t] = counts[best]
        counts[best] += 1


@numba.njit(cache=True, nogil=True)
def exhaustive_scan(sizes, weights, dataset_index, dataset_sample_index):  # pragma: no cover
    """The plain exhaustive greedy: spent datasets leave the race."""
    n = sizes.shape[0]
    counts = numpy.zeros(n, dtype=numpy.int64)
    alive = numpy.arange(n)
    num_alive = n
    for t in range(dataset_index.shape[0]):
        s = max(numpy.float64(t), 1.0)
        best_slot = 0
        best = alive[0]
        best_error = weights[best] * s - numpy.float64(counts[best])
        for slot in range(1, num_alive):
            i = alive[slot]
            error = weights[i] * s - numpy.float64(counts[i])
            if error > best_error:
                best_error = error
                best = i
                best_slot = slot
        dataset_index[t] = best
        dataset_sample_index[t] = counts[best]
        counts[best] += 1
        if counts[best] == sizes[best]:  # keep `alive` in ascending id order
            for slot in range(best_slot, num_alive - 1):
                alive[slot] = alive[slot + 1]
            num_alive -= 1
