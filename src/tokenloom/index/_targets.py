"""The cumulative targets of a mixture schedule (:mod:`tokenloom.index.schedule`),
shared by the reference and the public builder so that both use the same float64
expressions."""

from __future__ import annotations

import numpy

__all__ = ["ScheduleArrays", "eligible", "phase_offsets", "scheduled_targets", "targets_in"]

ScheduleArrays = tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]
"""``(starts int64 [P], weights float64 [P, datasets], linear bool [P])``."""


def phase_offsets(schedule: ScheduleArrays) -> numpy.ndarray:
    """float64 ``[P, datasets]``: the cumulative target at each phase's start."""
    starts, weights, linear = schedule
    offsets = numpy.zeros(weights.shape, dtype=numpy.float64)
    for p in range(1, starts.size):
        length = float(starts[p] - starts[p - 1])
        if p == 1:
            offsets[1] = weights[0] * float(starts[1])
        elif linear[p - 1]:
            offsets[p] = offsets[p - 1] + (weights[p - 2] + weights[p - 1]) * (length / 2.0)
        else:
            offsets[p] = offsets[p - 1] + weights[p - 1] * length
    return offsets


def scheduled_targets(schedule: ScheduleArrays, t: int) -> numpy.ndarray:
    """float64 per dataset: the cumulative scheduled weight up to blended sample ``t``
    (megatron-core's ``weights * max(t, 1)`` in phase 0; a ramp's integral in a linear
    phase). Its sum is ``max(t, 1)`` up to rounding."""
    p = int(numpy.searchsorted(schedule[0], t, side="right")) - 1
    return targets_in(schedule, phase_offsets(schedule), p, t)


def targets_in(schedule: ScheduleArrays, offsets: numpy.ndarray, p: int, t: int) -> numpy.ndarray:
    """:func:`scheduled_targets` at ``t`` in phase ``p``, given :func:`phase_offsets`."""
    starts, weights, linear = schedule
    target: numpy.ndarray
    if p == 0:
        target = weights[0] * max(float(t), 1.0)
        return target
    d = float(t - starts[p])
    if not linear[p]:
        target = offsets[p] + weights[p] * d
        return target
    length = float(starts[p + 1] - starts[p])
    ramp = weights[p] - weights[p - 1]
    target = offsets[p] + weights[p - 1] * d + ramp * (d * d / (2.0 * length))
    return target


def eligible(schedule: ScheduleArrays, p: int, t: int) -> numpy.ndarray:
    """bool per dataset: its weight at ``t`` (in phase ``p``) is > 0, so it may be drawn."""
    starts, weights, linear = schedule
    positive: numpy.ndarray = weights[p] > 0
    if not linear[p]:
        return positive
    before: numpy.ndarray = weights[p - 1] > 0
    started = bool(t > starts[p])
    return before | (positive & started)
