"""numba helpers of ``fill_batch`` for source attribution (``return_document_ranges``);
imported only by :mod:`tokenloom.kernels.batch`.

The readable specification is :func:`tokenloom.index.ranges.reference_sample_ranges`
(the rows) and the sum of a row's ``loss_mask`` (its loss-bearing tokens); the property
tests compare ``get_batch`` with and without numba field by field.
"""

from __future__ import annotations

from typing import Any

import numpy
from numba import njit


@njit(cache=True, nogil=True)
def sample_ranges_into(
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    lengths: numpy.ndarray,
    j: int,
    extra: int,
    out: numpy.ndarray,
) -> Any:
    """Write the ``(document id, token start, token end)`` rows of sample-index row ``j``
    into ``out`` (``[width, 3]``; rows past ``width`` are counted, not written; the
    slots after the last row are set to -1) and return their count. Empty parts have
    no row; ``j`` -1 (a padding sample) has none at all."""
    if j < 0:
        out[:, :] = -1
        return numpy.int64(0)
    first, start = sample_index[j, 0], sample_index[j, 1]
    last, stop = sample_index[j + 1, 0], sample_index[j + 1, 1] + extra
    count = 0
    for position in range(first, last + 1):
        document = document_index[position]
        begin = start if position == first else 0
        end = stop if position == last else lengths[document]
        if end > begin:
            if count < out.shape[0]:
                out[count, 0] = document
                out[count, 1] = begin
                out[count, 2] = end
            count += 1
    if count < out.shape[0]:
        out[count:, :] = -1
    return numpy.int64(count)


@njit(cache=True, nogil=True)
def loss_tokens(out_loss: numpy.ndarray, masked: bool) -> Any:
    """Loss-bearing tokens of one filled row: its length when no rule can have masked
    a token (``masked`` False), else the count of non-zero ``loss_mask`` entries."""
    if not masked:
        return numpy.int64(out_loss.shape[0])
    count = 0
    for t in range(out_loss.shape[0]):
        if out_loss[t] != 0.0:
            count += 1
    return numpy.int64(count)
