"""numba kernels: the plain O(samples x datasets) greedy blending scans of helpers.cpp.

Used by :mod:`tokenloom.kernels.blend_fast` below its ``SCAN_BELOW`` datasets (see
:mod:`tokenloom.index.dispatch`). Readable twins:
:func:`tokenloom.index.reference.build_blending_indices` and
:func:`~tokenloom.index.reference.build_exhaustive_blending_indices`.
"""

from __future__ import annotations

import numba
import numpy


@numba.njit(cache=True, nogil=True)
def blend_scan(
    weights: numpy.ndarray, dataset_index: numpy.ndarray, dataset_sample_index: numpy.ndarray
) -> None:  # pragma: no cover
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
def exhaustive_scan(
    sizes: numpy.ndarray,
    weights: numpy.ndarray,
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> None:  # pragma: no cover
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
