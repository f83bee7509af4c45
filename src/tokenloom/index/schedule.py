"""Blending indices for a mixture schedule: weights that change with the sample index.

A schedule is a list of phases. Phase ``p`` starts at blended sample ``starts[p]``
(``starts[0] == 0``, strictly increasing) with one weight per dataset
(``weights[p]``, each row >= 0 and summing to 1). A constant phase holds its weights
until the next phase starts; a linear phase (``linear[p]``) starts from the previous
phase's weights at ``starts[p]`` and reaches its own at ``starts[p + 1]`` (so it is
neither the first nor the last phase). The last phase holds to the end.

The blend is megatron-core's greedy on the sampling error, with the error carried
across phase changes: sample ``t`` goes to the dataset with the largest float64
``target[i](t) - count[i]`` (the lowest id winning ties) among the datasets whose
weight at ``t`` is > 0, where ``target(t)`` is the cumulative scheduled weight up to
``t`` (:func:`scheduled_targets`). In phase 0, ``target(t)`` is megatron-core's own
expression ``weights[0] * max(t, 1)``, so a one-phase schedule gives
:func:`~tokenloom.index.build_blending_indices`'s indices byte for byte.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.errors import ConfigError
from tokenloom.index import arguments, dispatch, reference
from tokenloom.index._targets import ScheduleArrays, phase_offsets, scheduled_targets
from tokenloom.index.blending import build_blending_indices
from tokenloom.kernels import KERNELS

__all__ = [
    "ScheduleArrays",
    "build_scheduled_blending_indices",
    "schedule_arrays",
    "scheduled_targets",
]


def schedule_arrays(starts: Any, weights: Any, linear: Any) -> ScheduleArrays:
    """The validated arrays of a schedule (ConfigError naming the phase and value)."""
    starts = arguments.int_array(starts, "starts")
    weights = numpy.ascontiguousarray(numpy.asarray(weights, dtype=numpy.float64))
    linear = numpy.asarray(linear, dtype=bool).reshape(-1)
    if weights.ndim != 2 or weights.shape[0] != starts.size or linear.size != starts.size:
        raise ConfigError(
            f"a schedule needs one start, one weight row and one kind per phase: got "
            f"{starts.size} starts, weights of shape {weights.shape}, {linear.size} kinds"
        )
    if starts.size == 0 or starts[0] != 0 or numpy.any(numpy.diff(starts) <= 0):
        raise ConfigError(
            f"schedule starts {starts.tolist()}: the first phase starts at 0 and each "
            "next one later than the one before"
        )
    if weights.shape[1] == 0 or weights.shape[1] > arguments.MAX_DATASETS:
        raise ConfigError(f"a schedule blends 1 to {arguments.MAX_DATASETS} datasets")
    for p, row in enumerate(weights):
        if not (numpy.all(numpy.isfinite(row)) and numpy.all(row >= 0)) or not (
            abs(float(row.sum()) - 1.0) <= arguments.WEIGHT_SUM_TOLERANCE
        ):
            raise ConfigError(
                f"schedule phase {p}: weights {row.tolist()} must be finite, >= 0 and "
                "sum to 1 (normalise them)"
            )
    if linear.size and (linear[0] or linear[-1]):
        raise ConfigError(
            "a linear phase ramps from the previous phase's weights to its own at the next "
            "phase's start: the first and the last phase cannot be linear"
        )
    return starts, weights, linear


def build_scheduled_blending_indices(
    starts: Any, weights: Any, linear: Any, size: int
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(dataset_index int16, dataset_sample_index int64)`` of ``size`` samples blended
    by a schedule (the module's rule). A one-phase schedule of positive weights runs
    :func:`~tokenloom.index.build_blending_indices` (same bytes); otherwise the route
    of :func:`tokenloom.index.dispatch.schedule_route`."""
    schedule = schedule_arrays(starts, weights, linear)
    size = arguments.as_int(size, "size", minimum=0)
    starts, weights, linear = schedule
    distinct = numpy.unique(weights.T, axis=0).shape[0] == weights.shape[1]
    route = dispatch.schedule_route(
        starts.size, bool(numpy.all(weights > 0)), size, weights.shape[1], distinct
    )
    if route == dispatch.FIXED:
        return build_blending_indices(weights[0], size)
    kernels = None
    if route != dispatch.REFERENCE:
        kernels = KERNELS.get("blend_scan" if route == dispatch.SCAN else "blend_phases")
    if kernels is None:
        return reference.build_scheduled_blending_indices(schedule, size)
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    dataset_sample_index = numpy.empty(size, dtype=numpy.int64)
    offsets = phase_offsets(schedule)
    out = (dataset_index, dataset_sample_index)
    if route == dispatch.SCAN:
        kernels.schedule_scan(starts, weights, linear, offsets, *out)
    else:
        kernels.run(starts, weights, linear, offsets, *out)
    return dataset_index, dataset_sample_index
