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


@numba.njit(cache=True, nogil=True)
def _phase_scan(
    p: int,
    first: int,
    end: int,
    schedule: tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray, numpy.ndarray],
    counts: numpy.ndarray,
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> None:  # pragma: no cover
    """Samples ``[first, end)`` of phase ``p`` (see :func:`schedule_scan`)."""
    starts, weights, linear, offsets = schedule
    n = weights.shape[1]
    ramped = linear[p]
    length = numpy.float64(starts[p + 1] - starts[p]) if ramped else 1.0
    for t in range(first, end):
        d = numpy.float64(t - starts[p])
        q = d * d / (2.0 * length)
        best = -1
        best_error = 0.0
        for i in range(n):
            if ramped:
                if not (weights[p - 1, i] > 0 or (weights[p, i] > 0 and t > starts[p])):
                    continue
                ramp = weights[p, i] - weights[p - 1, i]
                target = offsets[p, i] + weights[p - 1, i] * d + ramp * q
            elif not weights[p, i] > 0:
                continue
            elif p == 0:
                target = weights[0, i] * max(numpy.float64(t), 1.0)
            else:
                target = offsets[p, i] + weights[p, i] * d
            error = target - numpy.float64(counts[i])
            if best < 0 or error > best_error:
                best_error = error
                best = i
        dataset_index[t] = best
        dataset_sample_index[t] = counts[best]
        counts[best] += 1


@numba.njit(cache=True, nogil=True)
def schedule_scan(
    starts: numpy.ndarray,
    weights: numpy.ndarray,
    linear: numpy.ndarray,
    offsets: numpy.ndarray,
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> None:  # pragma: no cover
    """The greedy of a mixture schedule, phase by phase, O(samples x datasets), the
    counts (the sampling error) carried across phases. Readable twin:
    :func:`tokenloom.index.reference.build_scheduled_blending_indices` (the same float64
    expressions, :mod:`tokenloom.index._targets`)."""
    counts = numpy.zeros(weights.shape[1], dtype=numpy.int64)
    size = dataset_index.shape[0]
    schedule = (starts, weights, linear, offsets)
    for p in range(starts.shape[0]):
        first = min(starts[p], size)
        end = size if p + 1 == starts.shape[0] else min(starts[p + 1], size)
        _phase_scan(p, first, end, schedule, counts, dataset_index, dataset_sample_index)
