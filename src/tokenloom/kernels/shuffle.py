"""numba kernel: numpy's legacy ``RandomState.shuffle``, bit for bit, with prefetching.

numpy shuffles a 1-D array by Fisher-Yates: for ``i`` from ``n - 1`` down to 1 it
draws ``j = random_interval(i)`` (the smallest all-ones mask covering ``i``, MT19937
words ANDed with it until one is ``<= i``; 64-bit words once ``i`` exceeds 32 bits)
and swaps ``x[i]`` and ``x[j]``. On a large array every swap waits for a cache miss
at a random ``x[j]``. The ``j`` sequence depends only on the generator, not on the
data, so this kernel draws a block of them ahead, prefetches their cache lines (the
misses then overlap) and swaps afterwards, in numpy's order: same array, same
generator state afterwards.

The generator state is numpy's own: ``key`` (uint32[624]) and ``pos`` as given by
``RandomState.get_state(legacy=False)["state"]``. Readable specification:
``numpy.random.RandomState.shuffle`` (used by :mod:`tokenloom.index.reference`).
"""

from __future__ import annotations

from typing import Any

import numpy
from numba import njit

from tokenloom.kernels.prefetch import prefetch_write

N = 624
M = 397
MATRIX_A = 0x9908B0DF
UPPER_MASK = 0x80000000
LOWER_MASK = 0x7FFFFFFF
WORD = 0xFFFFFFFF

BLOCK = 64
"""Swaps whose ``j`` are drawn and prefetched ahead (tuned on 2M int32; see
BENCHMARKS.md)."""


@njit(cache=True, nogil=True, inline="always")
def _step(key: numpy.ndarray, k: int, low: int, far: int) -> None:
    """State word ``k`` from itself, word ``low`` and word ``far`` (MT19937 recurrence)."""
    y = (numpy.uint64(key[k]) & UPPER_MASK) | (numpy.uint64(key[low]) & LOWER_MASK)
    mag = numpy.uint64(MATRIX_A) * (y & numpy.uint64(1))
    key[k] = numpy.uint32(numpy.uint64(key[far]) ^ (y >> numpy.uint64(1)) ^ mag)


@njit(cache=True, nogil=True)
def _twist(key: numpy.ndarray) -> None:
    """Regenerate the 624 state words in place (numpy's ``mt19937_gen`` loop order:
    the words after ``N - M`` read already regenerated ones)."""
    for k in range(N - M):
        _step(key, k, k + 1, k + M)
    for k in range(N - M, N - 1):
        _step(key, k, k + 1, k + M - N)
    _step(key, N - 1, 0, M - 1)


@njit(cache=True, nogil=True, inline="always")
def _temper(word: int) -> Any:
    """MT19937's output transform of one state word (as uint64, < 2**32)."""
    y = numpy.uint64(word)
    y ^= y >> numpy.uint64(11)
    y ^= (y << numpy.uint64(7)) & numpy.uint64(0x9D2C5680)
    y ^= (y << numpy.uint64(15)) & numpy.uint64(0xEFC60000)
    y ^= y >> numpy.uint64(18)
    return y & numpy.uint64(WORD)


@njit(cache=True, nogil=True, inline="always")
def _word(key: numpy.ndarray, p: int) -> tuple[int, int]:
    """``(next tempered MT19937 word, new pos)`` from state ``key`` at ``pos == p``."""
    if p >= N:
        _twist(key)
        p = 0
    return _temper(key[p]), p + 1


@njit(cache=True, nogil=True, inline="always")
def _mask(top: int) -> Any:
    """The smallest all-ones bit mask ``>= top``."""
    mask = top
    mask |= mask >> numpy.uint64(1)
    mask |= mask >> numpy.uint64(2)
    mask |= mask >> numpy.uint64(4)
    mask |= mask >> numpy.uint64(8)
    mask |= mask >> numpy.uint64(16)
    mask |= mask >> numpy.uint64(32)
    return mask


@njit(cache=True, nogil=True)
def next_uint32(key: numpy.ndarray, pos: numpy.ndarray) -> Any:
    """The next MT19937 word; ``pos`` is a one-element int64 array (numpy's ``pos``)."""
    value, pos[0] = _word(key, pos[0])
    return value


@njit(cache=True, nogil=True)
def next_uint64(key: numpy.ndarray, pos: numpy.ndarray) -> Any:
    """Two words, the first one high (numpy's ``mt19937_next64``)."""
    high = next_uint32(key, pos)
    return (high << numpy.uint64(32)) | next_uint32(key, pos)


@njit(cache=True, nogil=True)
def random_interval(key: numpy.ndarray, pos: numpy.ndarray, maximum: int) -> Any:
    """A uniform integer in ``[0, maximum]`` exactly as numpy's legacy
    ``random_interval`` draws it (masked rejection; no draw for ``maximum == 0``)."""
    top = numpy.uint64(maximum)
    if top == 0:
        return numpy.uint64(0)
    mask = _mask(top)
    if top <= numpy.uint64(WORD):
        value = next_uint32(key, pos) & mask
        while value > top:
            value = next_uint32(key, pos) & mask
    else:
        value = next_uint64(key, pos) & mask
        while value > top:
            value = next_uint64(key, pos) & mask
    return value


@njit(cache=True, nogil=True)
def _draw(key: numpy.ndarray, p: int, i: int, count: int, js: numpy.ndarray) -> Any:
    """``js[k] = random_interval(i - k)`` for ``k < count`` (all ``i - k`` in
    ``[1, 2**32)``), from state position ``p``; return the new position.

    Branch-free rejection: every word is written to ``js[k]``, and ``k`` moves on only
    when it was accepted (a rejected one is overwritten by the next word).
    """
    k = 0
    top = numpy.uint64(i)
    mask = _mask(top)
    while k < count:
        if p >= N:
            _twist(key)
            p = 0
        while p < N and k < count:
            value = _temper(key[p]) & mask
            p += 1
            js[k] = numpy.int64(value)
            accepted = numpy.uint64(value <= top)
            k += numpy.int64(accepted)
            top -= accepted
            mask >>= numpy.uint64(top <= (mask >> numpy.uint64(1)))  # _mask(top), cheaper
    return p


@njit(cache=True, nogil=True)
def plain_steps(x: numpy.ndarray, key: numpy.ndarray, pos: numpy.ndarray, low: int) -> Any:
    """numpy's Fisher-Yates steps one at a time for ``i = n - 1`` down to ``low + 1``
    (no prefetching); return the next ``i``, ``min(n - 1, low)``."""
    i = x.shape[0] - 1
    while i > low:
        j = numpy.int64(random_interval(key, pos, i))
        value = x[i]
        x[i] = x[j]
        x[j] = value
        i -= 1
    return i


@njit(cache=True, nogil=True)
def shuffle(x: numpy.ndarray, key: numpy.ndarray, pos: numpy.ndarray, block: int) -> None:
    """Shuffle ``x`` in place like ``RandomState.shuffle``; advance ``key``/``pos``.

    ``block`` swaps at a time: draw their ``j``, prefetch ``x[j]``, then swap.
    """
    block = max(1, block)
    js = numpy.empty(block, dtype=numpy.int64)
    i = plain_steps(x, key, pos, WORD)  # 64-bit intervals: over 2**32 items, rare
    p = pos[0]
    while i >= 1:
        count = min(block, i)
        p = _draw(key, p, i, count, js)
        for k in range(count):
            prefetch_write(x, js[k])
        for k in range(count):
            a = i - k
            b = js[k]
            value = x[a]
            x[a] = x[b]
            x[b] = value
        i -= count
    pos[0] = p
