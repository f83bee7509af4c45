"""Exact fast blending: the greedy of helpers.cpp without scanning every dataset.

The greedy gives sample ``t`` to the dataset with the largest float64 error
``e_i = w_i * s - c_i`` (``s = max(t, 1)``, ``c_i`` samples taken so far, lowest id
on ties).  Scanning all ``n`` datasets per sample costs O(n).  But the winning error
stays in a narrow band (about 0.5 for typical weights), so only the few datasets whose
error is near the top can win.  This kernel keeps a *level* ``L`` and

* an **active set** holding every dataset whose error may be ``>= L`` now;
* a **calendar queue** of all other datasets keyed by the first step at which their
  error could reach ``L`` (a conservative float bound; errors only grow between picks).

Each sample: move the datasets that became due from the queue to the active set, take
the exact greedy winner inside the active set (same float64 expression, lowest id on
ties) and, since every inactive error is ``< L``, that winner is the global winner as
soon as its error is ``>= L``.  Only the winner's error changes; it goes back to the
queue when its error drops below ``L``.  If the active best falls below ``L`` the step
is decided by a full scan (still exact) and ``L`` is re-chosen ("rebuild") as the
``K``-th largest error, which guarantees a winner ``>= L`` for at least ``K`` steps.
The result is bit-identical with the plain scan (:mod:`tokenloom.kernels.blend_scan`)
and the readable :mod:`tokenloom.index.reference`; the property tests check it. Which
of the two runs for which inputs is decided in :mod:`tokenloom.index.dispatch`.

Datasets with bit-identical weights are merged into one *group* first: inside a group
the errors differ only by the counts, so the group is served round-robin in id order
(the member with the fewest samples and the lowest id always wins).  The greedy then
runs over groups, with the group's next member as its id for tie-breaking; many equal
shards cost as little as one dataset.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numba
import numpy

from tokenloom.kernels import blend_queue as queues

INF_STEP = numpy.int64(1 << 62)
#: relative/absolute slack that makes activation steps safe lower bounds (>> 2**-52)
SLACK = 1e-12
#: int64 bits of a float64, made to sort as the floats do (:func:`ordered`)
ORDER_MASK = numpy.int64(0x7FFFFFFFFFFFFFFF)
ORDER_MIN = numpy.int64(-0x7FFFFFFFFFFFFFFF - 1)
KEY_NONE = numpy.int64(1 << 62)


def target_active(num_groups: int) -> Any:
    """How many groups the first rebuild leaves above the level."""
    return int(math.sqrt(num_groups)) + 8


def period_for(num_groups: int) -> Any:
    """Steps between two rebuilds: a rebuild costs O(n), so about O(1) per step."""
    return 2 * num_groups + 1024


@numba.njit(cache=True, nogil=True, inline="always")
def activation_step(
    inverse_weight: float, count: int, level: float, t: int
) -> Any:  # pragma: no cover - compiled
    """A step ``> t`` no later than the first one where ``weight*s - count >= level``
    (``inverse_weight = 1 / weight``; the slack covers every rounding involved)."""
    c = numpy.float64(count)
    numerator = (c + level) - SLACK * (c + abs(level) + 1.0)
    if numerator <= 0.0:
        return t + 1
    x = numerator * inverse_weight * (1.0 - SLACK)
    if x >= 4.0e18:
        return INF_STEP
    step = numpy.int64(x)
    return step if step > t + 1 else t + 1


@numba.njit(cache=True, nogil=True)
def scan_all(
    groups: tuple[numpy.ndarray, ...],
    counts: numpy.ndarray,
    pos: numpy.ndarray,
    spent: numpy.ndarray,
    s: float,
) -> Any:  # pragma: no cover - compiled
    """Exact greedy winner over every live group (lowest next-member id on ties)."""
    weights, _, _, starts, members, _ = groups
    best, best_id, best_error = -1, -1, 0.0
    for g in range(weights.shape[0]):
        if spent[g]:
            continue
        error = weights[g] * s - numpy.float64(counts[g])
        ident = members[starts[g] + pos[g]]
        if best < 0 or error > best_error or (error == best_error and ident < best_id):
            best, best_id, best_error = g, ident, error
    return best


@numba.njit(cache=True, nogil=True)
def select(values: numpy.ndarray, count: int, k: int) -> Any:  # pragma: no cover - compiled
    """The ``k``-th smallest of ``values[:count]`` (0-based), reordering them in place:
    ``numpy.partition(values[:count], k)[k]`` by a plain quickselect (median-of-three
    pivot), which numba compiles in a fraction of the time of its ``partition``."""
    low, high = 0, count - 1
    while low < high:
        middle = (low + high) >> 1
        a, b, c = values[low], values[middle], values[high]
        pivot = max(min(a, b), min(max(a, b), c))
        i, j = low, high
        while i <= j:
            while values[i] < pivot:
                i += 1
            while values[j] > pivot:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                j -= 1
        if k <= j:
            high = j
        elif k >= i:
            low = i
        else:
            return values[k]
    return values[k]


@numba.njit(cache=True, nogil=True)
def rebuild(
    groups: tuple[numpy.ndarray, ...],
    counts: numpy.ndarray,
    spent: numpy.ndarray,
    t: int,
    target: int,
    queue: tuple[numpy.ndarray, ...],
    work: tuple[numpy.ndarray, ...],
) -> Any:  # pragma: no cover
    """Choose the level for step ``t + 1`` (the ``target``-th largest live error) and
    queue every live group by activation step; returns the level.  O(groups)."""
    weights, inverse = groups[0], groups[1]
    n = weights.shape[0]
    s = max(numpy.float64(t + 1), 1.0)
    errors, steps = work
    live = 0
    for g in range(n):
        if not spent[g]:
            errors[live] = weights[g] * s - numpy.float64(counts[g])
            live += 1
    level = -numpy.inf
    if live > target:
        level = select(errors, live, live - target)
    for g in range(n):
        steps[g] = INF_STEP if spent[g] else activation_step(inverse[g], counts[g], level, t)
    head, nxt, far_keys, far_ids, meta = queue
    queues.fill(head, nxt, far_keys, far_ids, meta, t, steps, n)
    return level


@numba.njit(cache=True, nogil=True)
def adapt_target(
    target: int, steps: int, fallback: bool, period: int, n: int
) -> Any:  # pragma: no cover - compiled
    """Lower the level (bigger target) when fallbacks come soon after a rebuild, raise
    it (smaller target) after a whole quiet period."""
    if fallback and steps < period // 4:
        return min(max(n // 2, 8), (3 * target) // 2 + 1)
    if not fallback:
        return max(8, (7 * target) // 8)
    return target


@numba.njit(cache=True, nogil=True)
def new_state(n: int) -> tuple[Any, ...]:  # pragma: no cover - compiled
    """Per-group counters, the active set and scratch space for :func:`greedy`."""
    counts = numpy.zeros(n, dtype=numpy.int64)  # samples of each member still in the round
    pos = numpy.zeros(n, dtype=numpy.int64)  # next member of each group (round-robin)
    spent = numpy.zeros(n, dtype=numpy.bool_)
    act = numpy.empty(n, dtype=numpy.int64)  # the active set: group, weight, count, key
    act_w, act_c, act_key = numpy.empty(n), numpy.empty(n), numpy.empty(n, dtype=numpy.int64)
    work = (numpy.empty(n), numpy.empty(n, dtype=numpy.int64))
    return counts, pos, spent, act, act_w, act_c, act_key, work


@numba.njit(cache=True, nogil=True, inline="always")
def ordered(value: float) -> Any:  # pragma: no cover - compiled
    """``value``'s float64 bits as an int64 of the same order (``-0.0`` and ``0.0`` equal,
    as the floats compare; no NaN ever reaches it): the magnitude bits, negated for a
    negative value."""
    bits = numpy.array([value]).view(numpy.int64)[0]
    sign = bits >> 63
    return ((bits & ORDER_MASK) ^ sign) - sign


@numba.njit(cache=True, nogil=True)
def greedy(
    groups: tuple[numpy.ndarray, ...],
    target: int,
    period: int,
    queue: tuple[numpy.ndarray, ...],
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
) -> tuple[int, int]:
    """The exact greedy over ``groups`` (see :func:`group_datasets`).

    ``target`` is the initial active-set size a rebuild aims at, ``period`` the number
    of steps after which the level is re-chosen anyway.  Returns the numbers of
    rebuilds and of fallbacks (for profiling).  The per-step work is written out here
    on purpose: numba reference-counts the array arguments of inlined helpers, which
    doubled the cost of a step.  The active set's winner is found in two branch-free
    passes that LLVM vectorises: the float64 errors (the C++ expression) with their
    maximum on the raw int64 bits (the floats' order when it is positive; else redone
    on :func:`ordered` bits), and the smallest ``id << 16 | slot`` among the maxima
    (the lowest id wins a tie)."""  # pragma: no cover - compiled
    weights, inverse, sizes, starts, members, limits = groups
    n = weights.shape[0]
    head, nxt, far_keys, far_ids, meta = queue
    mask = meta[1]
    counts, pos, spent, act, act_w, act_c, act_key, work = new_state(n)
    errors = numpy.empty(n)
    bits = errors.view(numpy.int64)
    ident = members[starts]  # each group's next member (members[starts + pos])
    before = numpy.int64(dataset_index.shape[0]) * 0 - 1  # not a literal: one compile
    level = rebuild(groups, counts, spent, before, target, queue, work)
    level_bits = ordered(level)
    num_active = last_rebuild = rebuilds = fallbacks = 0
    for t in range(dataset_index.shape[0]):
        s = max(numpy.float64(t), 1.0)
        g = head[t & mask]  # the ring's bucket of step t (queues.drain), filled in as walked
        head[t & mask] = -1
        while g >= 0:
            act[num_active], act_w[num_active] = g, weights[g]
            act_c[num_active] = numpy.float64(counts[g])
            act_key[num_active] = (ident[g] << 16) | num_active
            num_active += 1
            g = nxt[g]
        if meta[0] > 0 and far_keys[0] <= t:  # rare: due in the far heap
            due = queues.drain_far(far_keys, far_ids, meta, t, act, num_active)
            for k in range(num_active, due):
                g = act[k]
                act_w[k], act_c[k] = weights[g], numpy.float64(counts[g])
                act_key[k] = (ident[g] << 16) | k
            num_active = due
        top = ORDER_MIN
        for k in range(num_active):  # raw bits: the order of the floats when top > 0.0
            errors[k] = act_w[k] * s - act_c[k]
            top = max(top, bits[k])
        if top <= 0:  # no positive error: the order-preserving bits (ordered())
            top = ORDER_MIN
            for k in range(num_active):
                b = bits[k]
                sign = b >> 63
                b = ((b & ORDER_MASK) ^ sign) - sign
                bits[k] = b
                top = max(top, b)
        key = KEY_NONE
        for k in range(num_active):
            key = min(key, act_key[k] if bits[k] == top else KEY_NONE)
        fallback = top < level_bits
        slot = key & 0xFFFF
        best = scan_all(groups, counts, pos, spent, s) if fallback else act[slot]
        dataset_index[t] = ident[best]
        dataset_sample_index[t] = counts[best]
        pos[best] += 1
        if pos[best] == sizes[best]:  # round complete: the group's count goes up
            pos[best] = 0
            counts[best] += 1
            spent[best] = limits.shape[0] > 0 and counts[best] == limits[best]
        ident[best] = members[starts[best] + pos[best]]
        if fallback or t - last_rebuild >= period:
            fallbacks += fallback
            target = adapt_target(target, t - last_rebuild, fallback, period, n)
            level = rebuild(groups, counts, spent, t, target, queue, work)
            level_bits = ordered(level)
            num_active, last_rebuild, rebuilds = 0, t, rebuilds + 1
            continue
        if pos[best] > 0:  # same error, next member: stays active
            act_key[slot] = (ident[best] << 16) | slot
            continue
        step = INF_STEP if spent[best] else activation_step(inverse[best], counts[best], level, t)
        if step <= t + 1:  # still at the level: stays active, one more sample counted
            act_key[slot] = (ident[best] << 16) | slot
            act_c[slot] += 1.0
        else:  # below the level again: back to the queue
            num_active -= 1
            act[slot], act_w[slot] = act[num_active], act_w[num_active]
            act_c[slot] = act_c[num_active]
            act_key[slot] = (act_key[num_active] & ~numpy.int64(0xFFFF)) | slot
            if step < INF_STEP:
                queues.push(head, nxt, far_keys, far_ids, meta, t, step, best)
    return rebuilds, fallbacks


def group_datasets(weights: numpy.ndarray, sizes: numpy.ndarray) -> tuple[numpy.ndarray, ...]:
    """Merge datasets with bit-identical weights: ``(weights, 1 / weights, members per
    group, first member, member ids grouped and ascending, samples per member)``.
    ``sizes`` (exhaustive blend) is empty or per dataset; equal weights mean equal sizes."""
    unique, inverse, group_sizes = numpy.unique(weights, return_inverse=True, return_counts=True)
    members = numpy.argsort(inverse, kind="stable").astype(numpy.int64)
    starts = numpy.concatenate(([0], numpy.cumsum(group_sizes)[:-1])).astype(numpy.int64)
    limits = sizes[members[starts]] if sizes.size else numpy.empty(0, dtype=numpy.int64)
    group_sizes = group_sizes.astype(numpy.int64)
    return unique, 1.0 / unique, group_sizes, starts, members, limits


def run(
    weights: numpy.ndarray,
    sizes: numpy.ndarray,
    dataset_index: numpy.ndarray,
    dataset_sample_index: numpy.ndarray,
    target: Optional[int] = None,
    period: Optional[int] = None,
) -> tuple[int, int]:
    """Run :func:`greedy` with the default tuning; returns its profiling counters."""
    groups = group_datasets(weights, sizes)
    n = groups[0].shape[0]
    target = target_active(n) if target is None else target
    period = period_for(n) if period is None else period
    queue = queues.new_queue(n)
    return greedy(groups, target, period, queue, dataset_index, dataset_sample_index)
