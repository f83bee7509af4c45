"""numba kernel of the keyed shuffle bijection (``shuffle_mode="bijection"``).

A position ``k`` of a shuffle range of ``n`` samples goes to a row in ``[0, n)`` by a
balanced Feistel network over ``2**bits >= n`` values (``bits`` even, so the two
halves have ``bits / 2`` bits each), ``ROUNDS`` rounds, each round function the
splitmix64 finaliser of the right half XOR its round key, and cycle walking: the
network is applied again until the value falls inside ``[0, n)``. A Feistel network is
a permutation of ``[0, 2**bits)`` whatever its round function, and cycle walking
restricts a permutation to a subset, so this is a permutation of ``[0, n)``; with
``2**bits < 4 n`` a position walks fewer than four steps on average.

The parameters are a ``uint64[2, 2 + ROUNDS]`` table, one row per shuffle range
(megatron-core shuffles ``[0, first)`` and ``[first, total)`` separately): ``row[0] =
n``, ``row[1] = bits / 2``, ``row[2:]`` the round keys. Position ``k < first`` maps to
``permute(row 0, k)``, a later one to ``first + permute(row 1, k - first)``.

Loaded through :data:`tokenloom.kernels.KERNELS` (``KERNELS.get("bijection")``).
Readable twin: :func:`tokenloom.index.bijection.reference_rows`.
"""

from __future__ import annotations

from typing import Any

import numpy
from numba import njit

ROUNDS = 6
"""Feistel rounds (four give a pseudo-random permutation for a random round function;
six leave no measurable structure, see docs/shuffle.md)."""


@njit(cache=True, nogil=True, inline="always")
def _mix(z: Any) -> Any:
    """splitmix64's finaliser (a bijection of uint64 with full avalanche)."""
    z = (z ^ (z >> numpy.uint64(30))) * numpy.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> numpy.uint64(27))) * numpy.uint64(0x94D049BB133111EB)
    return z ^ (z >> numpy.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def _encrypt(table: numpy.ndarray, r: int, x: Any) -> Any:
    """One pass of the Feistel network of range ``r`` over ``x < 2**bits``."""
    half = table[r, 1]
    mask = (numpy.uint64(1) << half) - numpy.uint64(1)
    left = x >> half
    right = x & mask
    for i in range(ROUNDS):
        left, right = right, left ^ (_mix(right ^ table[r, 2 + i]) & mask)
    return (left << half) | right


@njit(cache=True, nogil=True)
def permute(table: numpy.ndarray, r: int, k: int) -> Any:
    """The row of position ``k`` (``0 <= k < n``) in shuffle range ``r``."""
    n = table[r, 0]
    x = numpy.uint64(k)
    if n <= numpy.uint64(1):
        return x
    x = _encrypt(table, r, x)
    while x >= n:
        x = _encrypt(table, r, x)
    return x


@njit(cache=True, nogil=True)
def rows(table: numpy.ndarray, positions: numpy.ndarray, out: numpy.ndarray) -> int:
    """``out[i]`` = the sample-index row of position ``positions[i]`` (int64); returns
    0, or ``1 + i`` for the first position outside ``[0, total)`` (not written)."""
    first = numpy.int64(table[0, 0])
    total = first + numpy.int64(table[1, 0])
    for i in range(positions.shape[0]):
        k = numpy.int64(positions[i])
        if k < 0 or k >= total:
            return 1 + i
        if k < first:
            out[i] = numpy.int64(permute(table, 0, k))
        else:
            out[i] = first + numpy.int64(permute(table, 1, k - first))
    return 0


@njit(cache=True, nogil=True)
def fill_all(table: numpy.ndarray, out: numpy.ndarray) -> None:
    """``out[k]`` = the row of every position ``k < len(out)`` (the materialised index)."""
    first = numpy.int64(table[0, 0])
    for k in range(out.shape[0]):
        if k < first:
            out[k] = numpy.int64(permute(table, 0, k))
        else:
            out[k] = first + numpy.int64(permute(table, 1, k - first))
