"""numba kernel of the GPT sample index (one pass, checking documents as it goes).

Loaded through :data:`tokenloom.kernels.KERNELS` (``KERNELS.get("sample_index")``).
Readable twin: :func:`tokenloom.index.reference.build_sample_index`.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy

#: status codes returned by :func:`sample_index`
OK, OUT_OF_DOCUMENTS, NEGATIVE_OFFSET, BAD_DOCUMENT = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def remaining_tokens(
    sizes: numpy.ndarray, documents: numpy.ndarray, start: int
) -> Any:  # pragma: no cover - compiled
    """sum(sizes[documents[start:]]), or ``-1 - position`` of the first bad entry."""
    total = numpy.int64(0)
    for position in range(start, documents.shape[0]):
        document = documents[position]
        if document < 0 or document >= sizes.shape[0] or sizes[document] < 0:
            return -1 - position
        total += sizes[document]
    return total


@numba.njit(cache=True, nogil=True)
def sample_index(
    sizes: numpy.ndarray,
    documents: numpy.ndarray,
    sequence_length: int,
    extra: int,
    out: numpy.ndarray,
) -> tuple[int, int]:  # pragma: no cover
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
                # (repeated by every sample of a float32 count above the exact one)
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
