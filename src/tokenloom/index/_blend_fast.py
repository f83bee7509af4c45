"""Exact fast blending: the greedy of helpers.cpp without scanning every dataset.

The greedy gives sample ``t`` to the dataset with the largest float64 error
``e_i = w_i * s - c_i`` (``s = max(t, 1)``, ``c_i`` samples taken so far, lowest id
on ties).  Scanning all ``n`` datasets per sample costs O(n).  But the winning error
stays in a narrow band (about 0.5 for typical weights), so only the few datasets whose
error is near the top can win.  This kernel keeps a *level* ``L`` and

* an **active set** holding every dataset whose error may be ``>= L`` now;
* a **min-heap** of all other datasets keyed by the first step at which their error
  could reach ``L`` (a conservative float bound; errors only grow between picks).

Each sample: move the datasets that became due from the heap to the active set, take
the exact greedy winner inside the active set (same float64 expression, lowest id on
ties) and, since every inactive error is ``< L``, that winner is the global winner as
soon as its error is ``>= L``.  Only the winner's error changes; it goes back to the
heap when its error drops below ``L``.  If the active best falls below ``L`` the step
is decided by a full scan (still exact) and ``L`` is re-chosen ("rebuild") as the
``K``-th largest error, which guarantees a winner ``>= L`` for at least ``K`` steps.
The result is bit-identical with the plain scan; the property tests check it.
"""

from __future__ import annotations

import math

import numba
import numpy

from tokenloom.index._kernels import blend_scan, exhaustive_scan

INF_STEP = numpy.int64(1 << 62)
#: relative/absolute slack that makes activation steps safe lower bounds (>> 2**-52)
SLACK = 1e-12
#: below this many datasets the plain scan is faster
SCAN_BELOW = 48


def target_active(num_datasets: int) -> int:
    """How many datasets a rebuild leaves above the level."""
    return int(2.0 * math.sqrt(num_datasets)) + 8


@numba.njit(cache=True, nogil=True)
def activation_step(weight, count, level, t):  # pragma: no cover - compiled
    """A step ``> t`` no later than the first one where ``weight*s - count >= level``."""
    c = numpy.float64(count)
    numerator = (c + level) - SLACK * (c + abs(level) + 1.0)
    if numerator <= 0.0:
        return t + 1
    x = numerator / weight * (1.0 - SLACK)
    if x >= 4.0e18:
        return INF_STEP
    step = numpy.int64(x)
    return step if step > t + 1 else t + 1


@numba.njit(cache=True, nogil=True)
def heap_push(keys, ids, size, key, ident):  # pragma: no cover - compiled
    """Push ``(key, ident)`` on the binary min-heap of ``size`` items; returns the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        ids[i] = ids[parent]
        i = parent
    keys[i] = key
    ids[i] = ident
    return size + 1


@numba.njit(cache=True, nogil=True)
def heap_pop(keys, ids, size):  # pragma: no cover - compiled
    """Remove the root of the min-heap; returns the new size."""
    size -= 1
    key = keys[size]
    ident = ids[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and keys[child + 1] < keys[child]:
            child += 1
        if keys[child] >= key:
            break
        keys[i] = keys[child]
        ids[i] = ids[child]
        i = child
    if size > 0:
        keys[i] = key
        ids[i] = ident
    return size


@numba.njit(cache=True, nogil=True)
def scan_all(weights, counts, spent, s):  # pragma: no cover - compiled
    """Exact greedy winner over every live dataset (lowest id on ties)."""
    best = -1
    best_error = 0.0
    for i in range(weights.shape[0]):
        if spent[i]:
            continue
        error = weights[i] * s - numpy.float64(counts[i])
        if best < 0 or error > best_error:
            best = i
            best_error = error
    return best


@numba.njit(cache=True, nogil=True)
def scan_active(weights, counts, active, num_active, s):  # pragma: no cover - compiled
    """Exact greedy winner inside the active set: (slot, dataset, error)."""
    slot = -1
    best = -1
    best_error = -numpy.inf
    for k in range(num_active):
        i = active[k]
        error = weights[i] * s - numpy.float64(counts[i])
        if error > best_error or (error == best_error and i < best):
            slot = k
            best = i
            best_error = error
    return slot, best, best_error


@numba.njit(cache=True, nogil=True)
def rebuild(weights, counts, spent, t, target, keys, ids):  # pragma: no cover - compiled
    """Choose the level for step ``t + 1`` and queue every live dataset; returns
    ``(level, heap size)``.  The active set is emptied by the caller."""
    n = weights.shape[0]
    s = max(numpy.float64(t + 1), 1.0)
    errors = numpy.empty(n)
    live = 0
    for i in range(n):
        if not spent[i]:
            errors[live] = weights[i] * s - numpy.float64(counts[i])
            live += 1
    if live <= target:
        level = -numpy.inf
    else:
        level = numpy.partition(errors[:live], live - target)[live - target]
    size = 0
    for i in range(n):
        if not spent[i]:
            if level == -numpy.inf:
                step = t + 1
            else:
                step = activation_step(weights[i], counts[i], level, t)
            size = heap_push(keys, ids, size, step, i)
    return level, size


@numba.njit(cache=True, nogil=True)
def activate_due(t, keys, ids, heap_size, active, num_active):  # pragma: no cover
    """Move every queued dataset whose activation step is ``<= t`` to the active set."""
    while heap_size > 0 and keys[0] <= t:
        active[num_active] = ids[0]
        num_active += 1
        heap_size = heap_pop(keys, ids, heap_size)
    return heap_size, num_active


@numba.njit(cache=True, nogil=True)
def greedy(weights, sizes, target, dataset_index, dataset_sample_index):  # pragma: no cover
    """The exact greedy; ``sizes`` (or an empty array) makes it the exhaustive variant.

    Returns the number of rebuilds (for profiling)."""
    n = weights.shape[0]
    exhaustive = sizes.shape[0] == n
    counts = numpy.zeros(n, dtype=numpy.int64)
    spent = numpy.zeros(n, dtype=numpy.bool_)
    active = numpy.empty(n, dtype=numpy.int64)
    keys = numpy.empty(n, dtype=numpy.int64)
    ids = numpy.empty(n, dtype=numpy.int64)
    level, heap_size = rebuild(weights, counts, spent, -1, target, keys, ids)
    num_active = 0
    limit = 8 * target + 64
    rebuilds = 0
    for t in range(dataset_index.shape[0]):
        s = max(numpy.float64(t), 1.0)
        heap_size, num_active = activate_due(t, keys, ids, heap_size, active, num_active)
        slot, best, best_error = scan_active(weights, counts, active, num_active, s)
        fallback = best < 0 or best_error < level
        if fallback:
            best = scan_all(weights, counts, spent, s)
        dataset_index[t] = best
        dataset_sample_index[t] = counts[best]
        counts[best] += 1
        if exhaustive and counts[best] == sizes[best]:
            spent[best] = True
        if fallback or num_active > limit:
            level, heap_size = rebuild(weights, counts, spent, t, target, keys, ids)
            num_active = 0
            rebuilds += 1
            continue
        if spent[best]:
            step = INF_STEP
        else:
            step = activation_step(weights[best], counts[best], level, t)
        if step > t + 1:
            num_active -= 1
            active[slot] = active[num_active]
            if step < INF_STEP:
                heap_size = heap_push(keys, ids, heap_size, step, best)
    return rebuilds


def blend(weights, dataset_index, dataset_sample_index):
    """Fill the blending indices for ``weights`` (validated float64)."""
    n = weights.shape[0]
    if n < SCAN_BELOW:
        blend_scan(weights, dataset_index, dataset_sample_index)
        return
    empty = numpy.empty(0, dtype=numpy.int64)
    greedy(weights, empty, target_active(n), dataset_index, dataset_sample_index)


def exhaustive(sizes, weights, dataset_index, dataset_sample_index):
    """Fill the exhaustive blending indices for ``sizes`` (validated int64)."""
    n = sizes.shape[0]
    if n < SCAN_BELOW:
        exhaustive_scan(sizes, weights, dataset_index, dataset_sample_index)
        return
    greedy(weights, sizes, target_active(n), dataset_index, dataset_sample_index)
