"""The O(1)-memory shuffle of ``GPTDatasetConfig(shuffle_mode="bijection")``.

Instead of megatron-core's ``shuffle_index`` array (4 or 8 bytes a sample: 8 GB at
10^9 samples), the order in which samples are served is a keyed bijection of the
positions ``[0, total)``: a Feistel network with cycle walking
(:mod:`tokenloom.kernels.bijection` says how). Megatron's structure is kept: the
samples before the separate final epoch (``[0, first)``) and those of the final epoch
(``[first, total)``) are permuted each within their own range, with their own key, so
that position ``k < first`` always serves a row ``< first``, as with the exact shuffle.

* :func:`bijection_table`: the ``uint64[2, 2 + ROUNDS]`` parameters from the sizes, the
  seed and an identity string (the dataset's description), the same on every machine;
* :func:`reference_rows`: the readable twin of the kernel, in Python integers;
* :func:`shuffle_rows`: rows of many positions (kernel or reference, as
  :func:`tokenloom.index.dispatch.bijection_route` says);
* :class:`BijectionShuffle`: the read-only array-like that stands in for
  ``shuffle_index`` (``len``, ``shape``, ``item``, indexing, ``numpy.asarray``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError, SampleIndexError
from tokenloom.index import dispatch
from tokenloom.kernels import KERNELS

__all__ = [
    "MAX_RANGE",
    "ROUNDS",
    "BijectionShuffle",
    "bijection_table",
    "reference_permute",
    "reference_rows",
    "shuffle_rows",
]

ROUNDS = 6
"""Feistel rounds (:data:`tokenloom.kernels.bijection.ROUNDS`, which must be equal)."""

MAX_RANGE = 1 << 62
"""Largest shuffle range: ``2**bits`` must fit uint64 with ``bits`` even."""

_WORD = (1 << 64) - 1


def _mix(z: int) -> int:
    """splitmix64's finaliser on a Python integer (uint64 arithmetic)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _WORD
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _WORD
    return z ^ (z >> 31)


def _half_bits(n: int) -> int:
    """Half the (even) bit count of the smallest power of two >= ``n`` (at least 1)."""
    bits = max(2, (n - 1).bit_length())
    return (bits + 1) // 2


def _round_keys(seed: int, identity: str, which: int) -> list[int]:
    """``ROUNDS`` 64-bit keys of range ``which`` (0: before the final epoch, 1: it)."""
    text = f"tokenloom-bijection-v1\0{int(seed)}\0{which}\0{identity}".encode()
    state = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    keys = []
    for _ in range(ROUNDS):  # the splitmix64 sequence from that state
        state = (state + 0x9E3779B97F4A7C15) & _WORD
        keys.append(_mix(state))
    return keys


def bijection_table(first: int, total: int, seed: int, identity: str) -> numpy.ndarray:
    """The parameters of the shuffle of ``total`` samples whose first ``first`` (the
    samples before a separate final epoch; ``total`` when there is none) are permuted
    on their own.

    Raises:
        ConfigError: ``first`` or ``total`` negative, ``first > total``, or a range
            above :data:`MAX_RANGE`.
    """
    first, total = int(first), int(total)
    if first < 0 or first > total or total - first > MAX_RANGE or first > MAX_RANGE:
        raise ConfigError(
            f"bijection shuffle: first={first}, total={total} must satisfy 0 <= first <= "
            f"total, each range at most {MAX_RANGE}; this is a sizing error in the caller"
        )
    table = numpy.zeros((2, 2 + ROUNDS), dtype=numpy.uint64)
    for which, n in enumerate((first, total - first)):
        table[which, 0], table[which, 1] = n, _half_bits(n)
        table[which, 2:] = _round_keys(seed, identity, which)
    return table


def reference_permute(table: numpy.ndarray, which: int, k: int) -> int:
    """The row of position ``k`` in range ``which``: the Feistel network with cycle
    walking, step by step (the readable twin of ``kernels.bijection.permute``)."""
    n, half = int(table[which, 0]), int(table[which, 1])
    keys = [int(key) for key in table[which, 2:]]
    if n <= 1:
        return k
    mask = (1 << half) - 1
    x = k
    while True:
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        x = (left << half) | right
        if x < n:
            return x


def reference_rows(table: numpy.ndarray, positions: Any) -> numpy.ndarray:
    """The sample-index row of every position (int64); SampleIndexError for one outside
    ``[0, total)``."""
    first = int(table[0, 0])
    total = first + int(table[1, 0])
    out = numpy.empty(len(positions), dtype=numpy.int64)
    for i, k in enumerate(int(p) for p in positions):
        if not 0 <= k < total:
            raise _outside(k, total)
        out[i] = (
            reference_permute(table, 0, k)
            if k < first
            else first + (reference_permute(table, 1, k - first))
        )
    return out


def shuffle_rows(table: numpy.ndarray, positions: Any) -> numpy.ndarray:
    """:func:`reference_rows` of ``positions``, by the kernel when the dispatch table
    says so."""
    positions = numpy.asarray(positions, dtype=numpy.int64).reshape(-1)
    fast = None
    if dispatch.bijection_route(positions.shape[0]) == dispatch.KERNEL:
        fast = KERNELS.get("bijection")
    if fast is None:
        return reference_rows(table, positions)
    out = numpy.empty(positions.shape[0], dtype=numpy.int64)
    bad = int(fast.rows(table, positions, out))
    if bad:
        raise _outside(int(positions[bad - 1]), int(table[0, 0]) + int(table[1, 0]))
    return out


def _outside(k: int, total: int) -> SampleIndexError:
    return SampleIndexError(
        f"sample position {k} is outside the {total} samples of this bijection shuffle; "
        "ask for a position in [0, len(dataset))"
    )


class BijectionShuffle:
    """A read-only, O(1)-memory stand-in for ``shuffle_index``: ``self[k]`` is the row
    of ``sample_index`` that sample ``k`` is read from.

    Supports ``len()``, ``shape``/``ndim``/``size``/``dtype`` (int64), ``item(k)``,
    ``self[int]``, ``self[slice]`` / ``self[array]`` (int64 arrays) and
    ``numpy.asarray(self)`` (materialises every row: for small ranges and tests).
    ``table`` is the :func:`bijection_table` (what the index cache stores).
    """

    __slots__ = ("table", "first", "total")

    def __init__(self, table: numpy.ndarray) -> None:
        # a writable copy (128 bytes): one kernel specialisation, built or mapped
        self.table = numpy.array(table, dtype=numpy.uint64, order="C")
        if self.table.shape != (2, 2 + ROUNDS):
            raise ConfigError(
                f"a bijection table has shape {(2, 2 + ROUNDS)}, got {self.table.shape}; "
                "delete the index cache (it is rebuilt)"
            )
        self.first = int(self.table[0, 0])
        self.total = self.first + int(self.table[1, 0])

    ndim = 1
    dtype = numpy.dtype(numpy.int64)

    @property
    def shape(self) -> tuple[int]:
        """``(total,)``."""
        return (self.total,)

    @property
    def size(self) -> int:
        """The number of samples."""
        return self.total

    def __len__(self) -> int:
        return self.total

    def item(self, k: Any) -> int:
        """The row of position ``k`` (a Python int; negative ``k`` counts from the end)."""
        k = int(k)
        if k < 0:
            k += self.total
        return int(reference_rows(self.table, (k,))[0])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return shuffle_rows(self.table, numpy.arange(*key.indices(self.total)))
        if isinstance(key, (int, numpy.integer)):
            return numpy.int64(self.item(key))
        positions = numpy.asarray(key, dtype=numpy.int64)
        positions = numpy.where(positions < 0, positions + self.total, positions)
        return shuffle_rows(self.table, positions.reshape(-1)).reshape(positions.shape)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> numpy.ndarray:
        rows: numpy.ndarray = self[:]
        return rows if dtype is None else rows.astype(dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BijectionShuffle) and numpy.array_equal(self.table, other.table)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BijectionShuffle(total={self.total}, first={self.first})"
