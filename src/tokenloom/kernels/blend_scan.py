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
def _first_max(
    rows: numpy.ndarray, x: float, y: float, penalty: numpy.ndarray, counts: numpy.ndarray
) -> int:  # pragma: no cover
    """First maximum of ``rows[0] + rows[1] * x + rows[2] * y - counts + penalty`` (the
    penalty is 0, or -inf for a dataset that may not be drawn)."""
    a, b, c = rows[0], rows[1], rows[2]
    best = 0
    best_error = a[0] + b[0] * x + c[0] * y - numpy.float64(counts[0]) + penalty[0]
    for i in range(1, counts.shape[0]):
        error = a[i] + b[i] * x + c[i] * y - numpy.float64(counts[i]) + penalty[i]
        if error > best_error:
            best_error = error
            best = i
    return best


@numba.njit(cache=True, nogil=True)
def _phase_rows(
    p: int, schedule: tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray, numpy.ndarray]
) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:  # pragma: no cover
    """Phase ``p``'s target as rows ``(a, b, c)`` of ``a + b * x + c * y`` (adding the
    zeros of a plain phase changes no float64 value), and its penalties: at the phase's
    first sample and after it (a ramp's datasets from weight 0 start after it)."""
    starts, weights, linear, offsets = schedule
    n = weights.shape[1]
    rows = numpy.zeros((3, n), dtype=numpy.float64)
    first = numpy.full(n, -numpy.inf)
    later = numpy.full(n, -numpy.inf)
    for i in range(n):
        if p > 0:
            rows[0, i] = offsets[p, i]
        if linear[p]:
            rows[1, i] = weights[p - 1, i]
            rows[2, i] = weights[p, i] - weights[p - 1, i]
            if weights[p - 1, i] > 0:
                first[i] = 0.0
            if weights[p - 1, i] > 0 or weights[p, i] > 0:
                later[i] = 0.0
        else:
            rows[1, i] = weights[p, i]
            if weights[p, i] > 0:
                first[i] = 0.0
                later[i] = 0.0
    return rows, first, later


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
    """Samples ``[first, end)`` of phase ``p`` (see :func:`schedule_scan`): per sample one
    pass over contiguous per-phase rows, no per-dataset branch."""
    starts, linear = schedule[0], schedule[2]
    rows, penalty_first, penalty_later = _phase_rows(p, schedule)
    ramped = linear[p]
    length = numpy.float64(starts[p + 1] - starts[p]) if ramped else 1.0
    for t in range(first, end):
        penalty = penalty_first if t == starts[p] else penalty_later
        if p == 0:
            x, y = max(numpy.float64(t), 1.0), 0.0
        else:
            x = numpy.float64(t - starts[p])
            y = x * x / (2.0 * length) if ramped else 0.0
        best = _first_max(rows, x, y, penalty, counts)
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
