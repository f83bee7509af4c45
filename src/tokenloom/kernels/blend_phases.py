"""Exact fast blending by a mixture schedule: :mod:`blend_fast`'s level and calendar,
phase by phase.

In phase ``p`` the error of dataset ``i`` is the float64 ``((a + b*x) + k*y) - count``
of :func:`tokenloom.kernels.blend_scan.schedule_scan` (``a`` the target carried at the
phase's start, ``b`` and ``k`` the weight and the ramp, ``x`` the samples into the
phase, ``y = x*x / (2*length)``; ``k*y`` left out in a constant phase, which changes no
comparison). The exact target is non-decreasing in a phase (its slope is the scheduled
weight, >= 0), so between two picks an error only grows and the step at which it can
first reach the level ``L`` has a safe lower bound: the smaller root of ``a + b*x +
q*x*x = count + L - slack`` (``q = k / (2*length)``; ``x = (count + L - slack - a) / b``
in a constant phase), lowered by a relative margin far above the rounding of the float
expressions. The rest is :func:`tokenloom.kernels.blend_fast.greedy`: the active set
scanned in two vectorised passes, the winner certified when its error is ``>= L``,
else an exact scan of every eligible dataset and a new level.

Each phase's first sample is decided by an exact scan (a ramp's datasets from weight 0
are not eligible at it), then the level is chosen for the rest of the phase. Datasets
not eligible in a phase (weight 0) never enter its race. Readable twin:
:func:`tokenloom.index.reference.build_scheduled_blending_indices`; the property tests
check equality with it and with ``schedule_scan``.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy

from tokenloom.kernels import blend_fast
from tokenloom.kernels import blend_queue as queues

INF_STEP = blend_fast.INF_STEP
ORDER_MASK, ORDER_MIN, KEY_NONE = blend_fast.ORDER_MASK, blend_fast.ORDER_MIN, blend_fast.KEY_NONE
#: relative slack on the target (covers the rounding of ``a + b*x + k*y``, >> 2**-52)
SLACK = 1e-12
#: relative margin on an activation step (covers the rounding of the root, >> 2**-52)
ROOT_MARGIN = 1e-9


@numba.njit(cache=True, nogil=True)
def phase_rows(
    p: int, size: int, schedule: tuple[numpy.ndarray, ...]
) -> tuple[Any, ...]:  # pragma: no cover - compiled
    """Phase ``p``'s ``(a, b, k, q, slack, eligible at its first sample, eligible
    after it, first sample, end, ramp length)`` (``schedule_scan``'s rows)."""
    starts, weights, linear, offsets = schedule
    n = weights.shape[1]
    first = min(starts[p], size)
    end = size if p + 1 == starts.shape[0] else min(starts[p + 1], size)
    length = numpy.float64(starts[p + 1] - starts[p]) if linear[p] else 1.0
    a, b, k = numpy.zeros(n), numpy.zeros(n), numpy.zeros(n)
    at_first = numpy.zeros(n, dtype=numpy.bool_)
    later = numpy.zeros(n, dtype=numpy.bool_)
    x_end = numpy.float64(max(end - first, 1))
    for i in range(n):
        if p > 0:
            a[i] = offsets[p, i]
        if linear[p]:
            b[i], k[i] = weights[p - 1, i], weights[p, i] - weights[p - 1, i]
            at_first[i] = weights[p - 1, i] > 0
            later[i] = at_first[i] or weights[p, i] > 0
        else:
            b[i] = weights[p, i]
            at_first[i] = later[i] = weights[p, i] > 0
    q = k / (2.0 * length)
    slack = SLACK * (numpy.abs(a) + b * x_end + numpy.abs(q) * x_end * x_end + 1.0)
    return a, b, k, q, slack, at_first, later, first, end, length


@numba.njit(cache=True, nogil=True, inline="always")
def activation(
    a: float, b: float, q: float, slack: float, count: int, level: float, t: int, base: int
) -> Any:  # pragma: no cover - compiled
    """A step ``> t`` no later than the first where ``a + b*x + q*x*x - count >= level``
    (``x = step - base``), or ``INF_STEP`` if that never happens in the phase."""
    c = numpy.float64(count)
    need = (c + level) - (slack + SLACK * (c + abs(level))) - a
    if need <= 0.0:
        return t + 1
    if q == 0.0:
        if b <= 0.0:
            return INF_STEP
        x = need / b
    else:
        disc = b * b + 4.0 * q * need
        if disc < 0.0:
            return INF_STEP
        root = b + math.sqrt(disc)
        if root <= 0.0:
            return INF_STEP
        x = 2.0 * need / root
    x = x * (1.0 - ROOT_MARGIN) - 1.0
    if x >= 4.0e18:
        return INF_STEP
    step = base + numpy.int64(max(x, 0.0))
    return step if step > t + 1 else t + 1


@numba.njit(cache=True, nogil=True)
def exact_winner(
    rows: tuple[Any, ...], eligible: numpy.ndarray, counts: numpy.ndarray, x: float, y: float
) -> Any:  # pragma: no cover - compiled
    """The first maximum of the errors of the eligible datasets (``schedule_scan``)."""
    a, b, k = rows[0], rows[1], rows[2]
    best, best_error = -1, 0.0
    for i in range(counts.shape[0]):
        if eligible[i]:
            error = a[i] + b[i] * x + k[i] * y - numpy.float64(counts[i])
            if best < 0 or error > best_error:
                best, best_error = i, error
    return best


@numba.njit(cache=True, nogil=True)
def rebuild(
    rows: tuple[Any, ...],
    counts: numpy.ndarray,
    t: int,
    xy: tuple[float, float, int],
    target: int,
    queue: tuple[numpy.ndarray, ...],
    work: tuple[numpy.ndarray, ...],
) -> Any:  # pragma: no cover - compiled
    """The level for step ``t + 1`` (the ``target``-th largest eligible error there, at
    ``xy = (x, y, base)``), every eligible dataset queued by activation step."""
    a, b, k, q, slack, eligible = rows[0], rows[1], rows[2], rows[3], rows[4], rows[6]
    x, y, base = xy
    n = counts.shape[0]
    errors, steps = work
    live = 0
    for i in range(n):
        if eligible[i]:
            errors[live] = a[i] + b[i] * x + k[i] * y - numpy.float64(counts[i])
            live += 1
    level = -numpy.inf
    if live > target:
        level = blend_fast.select(errors, live, live - target)
    for i in range(n):
        steps[i] = INF_STEP
        if eligible[i]:
            steps[i] = activation(a[i], b[i], q[i], slack[i], counts[i], level, t, base)
    head, nxt, far_keys, far_ids, meta = queue
    queues.fill(head, nxt, far_keys, far_ids, meta, t, steps, n)
    return level


@numba.njit(cache=True, nogil=True)
def point(p: int, t: int, first: int, length: float, ramp: bool) -> tuple[float, float, int]:
    """``(x, y, base)`` of step ``t`` in phase ``p`` (``x = t - base``; phase 0:
    megatron-core's ``max(t, 1)``, base 0)."""  # pragma: no cover - compiled
    if p == 0:
        return max(numpy.float64(t), 1.0), 0.0, 0
    x = numpy.float64(t - first)
    return x, (x * x / (2.0 * length) if ramp else 0.0), first


@numba.njit(cache=True, nogil=True)
def phase_greedy(
    p: int,
    schedule: tuple[numpy.ndarray, ...],
    counts: numpy.ndarray,
    state: tuple[Any, ...],
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> int:
    """Phase ``p``'s samples (see the module); returns its number of rebuilds."""  # pragma: no cover
    queue, act, act_f, act_key, work, errors, target, period = state
    rows = phase_rows(p, dataset_index.shape[0], schedule)
    a, b, k, q, slack, at_first, eligible, first, end, length = rows
    ramp, n = bool(schedule[2][p]), counts.shape[0]
    if first >= end:
        return 0
    x, y, base = point(p, first, first, length, ramp)
    best = exact_winner(rows, at_first, counts, x, y)
    dataset_index[first], dataset_sample_index[first] = best, counts[best]
    counts[best] += 1
    act_a, act_b, act_k, act_c = act_f[0], act_f[1], act_f[2], act_f[3]
    bits = errors.view(numpy.int64)
    head, nxt, far_keys, far_ids, meta = queue
    mask = meta[1]
    level = rebuild(
        rows, counts, first, point(p, first + 1, first, length, ramp), target, queue, work
    )
    level_bits = blend_fast.ordered(level)
    num_active, last_rebuild, rebuilds = 0, first, 1
    for t in range(first + 1, end):
        x, y, base = point(p, t, first, length, ramp)
        i = head[t & mask]  # the ring's bucket of step t (queues.drain), filled in as walked
        head[t & mask] = -1
        while i >= 0:
            act[num_active], act_a[num_active], act_b[num_active] = i, a[i], b[i]
            act_k[num_active], act_c[num_active] = k[i], numpy.float64(counts[i])
            act_key[num_active] = (i << 16) | num_active
            num_active += 1
            i = nxt[i]
        if meta[0] > 0 and far_keys[0] <= t:  # rare: due in the far heap
            due = queues.drain_far(far_keys, far_ids, meta, t, act, num_active)
            for j in range(num_active, due):
                i = act[j]
                act_a[j], act_b[j], act_k[j] = a[i], b[i], k[i]
                act_c[j], act_key[j] = numpy.float64(counts[i]), (i << 16) | j
            num_active = due
        top = ORDER_MIN  # raw bits: the floats' order when top > 0 (as blend_fast.greedy)
        if ramp:
            for j in range(num_active):
                errors[j] = act_a[j] + act_b[j] * x + act_k[j] * y - act_c[j]
                top = max(top, bits[j])
        else:
            for j in range(num_active):
                errors[j] = act_a[j] + act_b[j] * x - act_c[j]
                top = max(top, bits[j])
        if top <= 0:  # no positive error: the order-preserving bits (blend_fast.ordered)
            top = ORDER_MIN
            for j in range(num_active):
                v = bits[j]
                sign = v >> 63
                v = ((v & ORDER_MASK) ^ sign) - sign
                bits[j] = v
                top = max(top, v)
        key = KEY_NONE
        for j in range(num_active):
            key = min(key, act_key[j] if bits[j] == top else KEY_NONE)
        fallback = top < level_bits
        slot = key & 0xFFFF
        best = exact_winner(rows, eligible, counts, x, y) if fallback else act[slot]
        dataset_index[t], dataset_sample_index[t] = best, counts[best]
        counts[best] += 1
        if fallback or t - last_rebuild >= period:
            target = blend_fast.adapt_target(target, t - last_rebuild, fallback, period, n)
            level = rebuild(
                rows, counts, t, point(p, t + 1, first, length, ramp), target, queue, work
            )
            level_bits = blend_fast.ordered(level)
            num_active, last_rebuild, rebuilds = 0, t, rebuilds + 1
            continue
        act_c[slot] += 1.0
        step = activation(a[best], b[best], q[best], slack[best], counts[best], level, t, base)
        if step > t + 1:  # below the level again: back to the queue
            num_active -= 1
            act[slot] = act[num_active]
            act_a[slot], act_b[slot] = act_a[num_active], act_b[num_active]
            act_k[slot], act_c[slot] = act_k[num_active], act_c[num_active]
            act_key[slot] = (act_key[num_active] & ~numpy.int64(0xFFFF)) | slot
            if step < INF_STEP:
                queues.push(head, nxt, far_keys, far_ids, meta, t, step, best)
    return rebuilds


@numba.njit(cache=True, nogil=True)
def schedule_fast(
    starts: numpy.ndarray,
    weights: numpy.ndarray,
    linear: numpy.ndarray,
    offsets: numpy.ndarray,
    queue: tuple[numpy.ndarray, ...],
    tuning: tuple[int, int],
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> int:
    """The schedule's greedy, phase by phase, the counts carried across phases (same
    arguments as ``schedule_scan`` plus the queue and ``(target, period)``); returns
    the number of rebuilds."""  # pragma: no cover - compiled
    n = weights.shape[1]
    counts = numpy.zeros(n, dtype=numpy.int64)
    act_f = (numpy.empty(n), numpy.empty(n), numpy.empty(n), numpy.empty(n))
    work = (numpy.empty(n), numpy.empty(n, dtype=numpy.int64))
    act, act_key = numpy.empty(n, dtype=numpy.int64), numpy.empty(n, dtype=numpy.int64)
    state = (queue, act, act_f, act_key, work, numpy.empty(n), tuning[0], tuning[1])
    schedule = (starts, weights, linear, offsets)
    rebuilds = 0
    for p in range(starts.shape[0]):
        rebuilds += phase_greedy(p, schedule, counts, state, dataset_index, dataset_sample_index)
    return rebuilds


def run(
    starts: numpy.ndarray,
    weights: numpy.ndarray,
    linear: numpy.ndarray,
    offsets: numpy.ndarray,
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
    target: int | None = None,
    period: int | None = None,
) -> int:
    """:func:`schedule_fast` with :mod:`blend_fast`'s default tuning."""
    n = weights.shape[1]
    target = blend_fast.target_active(n) if target is None else target
    period = blend_fast.period_for(n) if period is None else period
    queue = queues.new_queue(n)
    return int(
        schedule_fast(
            starts,
            weights,
            linear,
            offsets,
            queue,
            (target, period),
            dataset_index,
            dataset_sample_index,
        )
    )
