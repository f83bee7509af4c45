"""Blending indices: which dataset, and which of its samples, feeds each blended sample.

Same output as megatron-core 0.16.1's ``helpers.build_blending_indices`` and
``helpers.build_exhaustive_blending_indices`` (bit for bit). Which implementation runs
is decided by :mod:`tokenloom.index.dispatch` from the inputs: a numpy scan or the
reference for small blends, the numba kernels (:mod:`tokenloom.kernels`) otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import arguments, dispatch, reference
from tokenloom.kernels import KERNELS

__all__ = [
    "build_blending_indices",
    "build_blending_indices_numpy",
    "build_exhaustive_blending_indices",
]


def build_blending_indices(weights: Any, size: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Interleave datasets so that every prefix of the blend follows ``weights``.

    Args:
        weights: one float per dataset, each > 0, summing to 1 (normalise first).
        size: number of blended samples to draw.

    Returns:
        ``(dataset_index, dataset_sample_index)``: for every blended sample the dataset
        id (int16) and the running count of samples already taken from that dataset
        (int64).  Sample ``t`` goes to the dataset with the largest float64 error
        ``weights[i] * max(t, 1) - count[i]``, the lowest id winning ties.

    Raises:
        ConfigError: bad weights (not 1-D, not finite, not > 0, not summing to 1, more
            than 32767 datasets) or a negative / non-integer size.
    """
    weights = arguments.blending_weights(weights)
    size = arguments.as_int(size, "size", minimum=0)
    route = dispatch.blending_route(weights.size, size, numba_started=KERNELS.started())
    if route == dispatch.NUMPY:
        return _numpy_blend(weights, size)
    kernels = KERNELS.get("blend_scan" if route == dispatch.SCAN else "blend_fast")
    if kernels is None:
        return reference.build_blending_indices(weights, size)
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    dataset_sample_index = numpy.empty(size, dtype=numpy.int64)
    if route == dispatch.SCAN:
        kernels.blend_scan(weights, dataset_index, dataset_sample_index)
    else:
        kernels.run(weights, numpy.empty(0, dtype=numpy.int64), dataset_index, dataset_sample_index)
    return dataset_index, dataset_sample_index


def build_blending_indices_numpy(weights: Any, size: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """:func:`build_blending_indices` in numpy, without numba: the reference's
    O(size x datasets) scan with preallocated buffers (the same float64 multiply and
    subtract, so the same winners; property-tested). The route for small blends."""
    weights = arguments.blending_weights(weights)
    size = arguments.as_int(size, "size", minimum=0)
    return _numpy_blend(weights, size)


def _numpy_blend(weights: numpy.ndarray, size: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    counts = numpy.zeros(weights.size, dtype=numpy.float64)  # exact integers below 2**53
    errors = numpy.empty(weights.size, dtype=numpy.float64)
    multiply, subtract, argmax = numpy.multiply, numpy.subtract, errors.argmax
    winners, taken = [], []
    for t in range(size):
        multiply(weights, max(float(t), 1.0), out=errors)
        subtract(errors, counts, out=errors)
        winner = int(argmax())  # first maximum: the lowest id wins ties
        winners.append(winner)
        taken.append(counts[winner])
        counts[winner] += 1.0
    return (
        numpy.array(winners, dtype=numpy.int16).reshape(-1),
        numpy.array(taken, dtype=numpy.int64).reshape(-1),
    )


def build_exhaustive_blending_indices(sizes: Any) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Interleave exactly ``sizes[i]`` samples of every dataset ``i``.

    Args:
        sizes: number of samples of each dataset, each > 0.

    Returns:
        ``(dataset_index int16, dataset_sample_index int64)`` of length ``sum(sizes)``:
        the greedy of :func:`build_blending_indices` with weights ``sizes / sum(sizes)``,
        a dataset dropping out once all its samples are placed.

    Raises:
        ConfigError: sizes empty, not integers, not > 0, or more than 32767 datasets.
    """
    sizes = arguments.exhaustive_sizes(sizes)
    total = int(sizes.sum())
    route = dispatch.exhaustive_route(sizes.size, total)
    kernels = None
    if route != dispatch.REFERENCE:
        kernels = KERNELS.get("blend_scan" if route == dispatch.SCAN else "blend_fast")
    if kernels is None:
        return reference.build_exhaustive_blending_indices(sizes)
    weights = sizes.astype(numpy.float64) / float(total)
    dataset_index = numpy.empty(total, dtype=numpy.int16)
    dataset_sample_index = numpy.empty(total, dtype=numpy.int64)
    if route == dispatch.SCAN:
        kernels.exhaustive_scan(sizes, weights, dataset_index, dataset_sample_index)
    else:
        kernels.run(weights, sizes, dataset_index, dataset_sample_index)
    return dataset_index, dataset_sample_index
