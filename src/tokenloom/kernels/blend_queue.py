"""A calendar queue of dataset ids keyed by integer step, for the fast blending kernel.

Keys within ``horizon`` steps of "now" go into a ring of buckets (singly linked lists
threaded through ``nxt``), O(1) to push and to drain; the rare keys further away (tiny
weights) wait in a binary min-heap.  Used by :mod:`tokenloom.kernels.blend_fast` (numba).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy

# layout of the int64 ``meta`` array
_FAR_SIZE, _MASK = 0, 1
#: keys at or beyond this are never due
INF = numpy.int64(1 << 62)


def new_queue(num_items: int) -> tuple[numpy.ndarray, ...]:
    """A queue for ids ``0 .. num_items - 1``: (head, nxt, far_keys, far_ids, meta)."""
    horizon = 4096
    while horizon < 8 * num_items:  # reactivations are ~1/weight steps ahead
        horizon *= 2
    head = numpy.full(horizon, -1, dtype=numpy.int64)
    nxt = numpy.full(num_items, -1, dtype=numpy.int64)
    far_keys = numpy.empty(num_items, dtype=numpy.int64)
    far_ids = numpy.empty(num_items, dtype=numpy.int64)
    meta = numpy.array([0, horizon - 1], dtype=numpy.int64)
    return head, nxt, far_keys, far_ids, meta


@numba.njit(cache=True, nogil=True, inline="always")
def heap_push(
    keys: numpy.ndarray, ids: numpy.ndarray, size: int, key: int, ident: int
) -> Any:  # pragma: no cover - compiled
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


@numba.njit(cache=True, nogil=True, inline="always")
def heap_pop(
    keys: numpy.ndarray, ids: numpy.ndarray, size: int
) -> Any:  # pragma: no cover - compiled
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


@numba.njit(cache=True, nogil=True, inline="always")
def heapify(
    keys: numpy.ndarray, ids: numpy.ndarray, size: int
) -> None:  # pragma: no cover - compiled
    """Floyd's bottom-up construction of the min-heap on the first ``size`` items."""
    for start in range(size // 2 - 1, -1, -1):
        key, ident, i = keys[start], ids[start], start
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and keys[child + 1] < keys[child]:
                child += 1
            if keys[child] >= key:
                break
            keys[i], ids[i], i = keys[child], ids[child], child
        keys[i], ids[i] = key, ident


@numba.njit(cache=True, nogil=True, inline="always")
def fill(
    head: numpy.ndarray,
    nxt: numpy.ndarray,
    far_keys: numpy.ndarray,
    far_ids: numpy.ndarray,
    meta: numpy.ndarray,
    now: int,
    steps: numpy.ndarray,
    count: int,
) -> None:  # pragma: no cover
    """Replace the contents by ids ``0 .. count - 1`` due at ``steps[id] > now``
    (ids with a step of ``INF`` or more are left out); O(count)."""
    head[:] = -1
    mask = meta[_MASK]
    far = 0
    for ident in range(count):
        key = steps[ident]
        if key - now <= mask:
            bucket = key & mask
            nxt[ident] = head[bucket]
            head[bucket] = ident
        elif key < INF:
            far_keys[far], far_ids[far] = key, ident
            far += 1
    heapify(far_keys, far_ids, far)
    meta[_FAR_SIZE] = far


@numba.njit(cache=True, nogil=True, inline="always")
def push(
    head: numpy.ndarray,
    nxt: numpy.ndarray,
    far_keys: numpy.ndarray,
    far_ids: numpy.ndarray,
    meta: numpy.ndarray,
    now: int,
    key: int,
    ident: int,
) -> None:  # pragma: no cover
    """Queue ``ident`` to come due at step ``key > now``."""
    mask = meta[_MASK]
    if key - now <= mask:
        bucket = key & mask
        nxt[ident] = head[bucket]
        head[bucket] = ident
    else:
        meta[_FAR_SIZE] = heap_push(far_keys, far_ids, meta[_FAR_SIZE], key, ident)


@numba.njit(cache=True, nogil=True, inline="always")
def drain(
    head: numpy.ndarray,
    nxt: numpy.ndarray,
    far_keys: numpy.ndarray,
    far_ids: numpy.ndarray,
    meta: numpy.ndarray,
    now: int,
    out: numpy.ndarray,
    count: int,
) -> Any:  # pragma: no cover
    """Append every id due at step ``now`` to ``out[count:]``; returns the new count.

    Must be called for every step in order (the ring relies on it)."""
    bucket = now & meta[_MASK]
    ident = head[bucket]
    head[bucket] = -1
    while ident >= 0:
        out[count] = ident
        count += 1
        ident = nxt[ident]
    return drain_far(far_keys, far_ids, meta, now, out, count)


@numba.njit(cache=True, nogil=True, inline="always")
def drain_far(
    far_keys: numpy.ndarray,
    far_ids: numpy.ndarray,
    meta: numpy.ndarray,
    now: int,
    out: numpy.ndarray,
    count: int,
) -> Any:  # pragma: no cover
    """The far heap's part of :func:`drain`: append its ids due at ``now``."""
    while meta[_FAR_SIZE] > 0 and far_keys[0] <= now:
        out[count] = far_ids[0]
        count += 1
        meta[_FAR_SIZE] = heap_pop(far_keys, far_ids, meta[_FAR_SIZE])
    return count
