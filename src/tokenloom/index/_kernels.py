"""numba-compiled GPT index kernels and the simple greedy blending scan.

Imported only through :func:`tokenloom.index._jit.kernels`; it needs numba.  Every
function here has a readable twin in :mod:`tokenloom.index.reference`.
"""

from __future__ import annotations

import numba
import numpy

#: status codes returned by :func:`sample_index`
OK, OUT_OF_DOCUMENTS, NEGATIVE_OFFSET, BAD_DOCUMENT = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def remaining_tokens(sizes, documents, start):  # pragma: no cover - compiled
    """sum(sizes[documents[start:]]), or ``-1 - position`` of the first bad entry."""
    total = numpy.int64(0)
    for position in range(start, documents.shape[0]):
        document = documents[position]
        if document < 0 or document >= sizes.shape[0] or sizes[document] < 0:
            return -1 - position
        total += sizes[document]
    return total


@numba.njit(cache=True, nogil=True)
def sample_index(sizes, documents, sequence_length, extra, out):  # pragma: no cover
    """Fill ``out[k] = (position, offset)`` where sample k starts, in one pass.

    Returns ``(status, value)``: on OK ``value`` is the number of tokens in all of
    ``documents`` (for the caller's consistency check); on BAD_DOCUMENT the position
    of the offending entry (an id out of range or a negative length: checked here, so
    no separate validation pass is needed)."""
    num_samples = out.shape[0] - 1
    last = documents.shape[0] - 1
    num_documents = sizes.shape[0]
    position, offset = 0, numpy.int64(0)
    document = documents[0]
    if document < 0 or document >= num_documents or sizes[document] < 0:
        return BAD_DOCUMENT, 0
    length = numpy.int64(sizes[document])
    total = length  # tokens of documents[: position + 1]
    out[0, 0] = 0
    out[0, 1] = 0
    for k in range(1, num_samples + 1):
        needed = sequence_length + extra  # tokens the sample still has to cover
        while length - offset < needed:
            needed -= length - offset
            if position == last:  # out of documents: the sample ends at the very end
                if k != num_samples:
                    return OUT_OF_DOCUMENTS, 0
                offset, needed = length, 0
                break
            position += 1
            offset = 0
            document = documents[position]
            if document < 0 or document >= num_documents or sizes[document] < 0:
                return BAD_DOCUMENT, position
            length = numpy.int64(sizes[document])
            total += length
        offset += needed - extra
        if offset < 0:
            return NEGATIVE_OFFSET, 0
        out[k, 0] = position
        out[k, 1] = offset
    rest = remaining_tokens(sizes, documents, position + 1)
    if rest < 0:
        return BAD_DOCUMENT, -1 - rest
    return OK, total + rest


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
