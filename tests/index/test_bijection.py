"""The bijection shuffle (``shuffle_mode="bijection"``): a permutation of each of its two
ranges at every size tested, the numba kernel equal to its readable twin, and the
array-like that stands in for ``shuffle_index``."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenloom.errors import ConfigError, SampleIndexError
from tokenloom.index import bijection, dispatch
from tokenloom.kernels import KERNELS

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SPECIAL = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 97, 127, 128, 129, 255, 256, 257]
SPECIAL += [1021, 1023, 1024, 1025, 4093, 4095, 4096, 4097, 65535, 65536, 65537]
SIZES = st.one_of(st.sampled_from(SPECIAL), st.integers(1, 3000))


@pytest.fixture(scope="module")
def kernel():
    fast = KERNELS.get("bijection")
    if fast is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    return fast


def _all_rows(kernel, table) -> numpy.ndarray:
    total = int(table[0, 0]) + int(table[1, 0])
    out = numpy.empty(total, dtype=numpy.int64)
    kernel.fill_all(table, out)
    return out


def test_rounds_agree():
    fast = KERNELS.get("bijection")
    if fast is not None:
        assert fast.ROUNDS == bijection.ROUNDS


@pytest.mark.parametrize("n", SPECIAL)
def test_permutation_at_special_sizes(kernel, n):
    """1, 2, primes, powers of two and their neighbours: every row exactly once."""
    table = bijection.bijection_table(n, n, seed=1234, identity="special")
    rows = _all_rows(kernel, table)
    assert numpy.array_equal(numpy.sort(rows), numpy.arange(n))


@SETTINGS
@given(total=SIZES, cut=st.floats(0, 1), seed=st.integers(0, 2**32 - 1), name=st.text(max_size=8))
def test_each_range_is_a_permutation_and_kernel_equals_reference(kernel, total, cut, seed, name):
    first = int(cut * total)
    table = bijection.bijection_table(first, total, seed, name)
    rows = _all_rows(kernel, table)
    assert numpy.array_equal(numpy.sort(rows[:first]), numpy.arange(first))
    assert numpy.array_equal(numpy.sort(rows[first:]), numpy.arange(first, total))
    reference = bijection.reference_rows(table, numpy.arange(total))
    assert numpy.array_equal(rows, reference)
    assert numpy.array_equal(bijection.shuffle_rows(table, numpy.arange(total)), reference)


@SETTINGS
@given(
    total=st.integers(2**31, 2**40),
    seed=st.integers(0, 2**32 - 1),
    positions=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40),
)
def test_large_ranges_kernel_equals_reference(kernel, total, seed, positions):
    """Beyond 32 bits (sizes the exact shuffle stores as int64): same rows, in range."""
    table = bijection.bijection_table(total // 3, total, seed, "large")
    positions = numpy.array(positions, dtype=numpy.int64) % total
    out = numpy.empty(len(positions), dtype=numpy.int64)
    assert kernel.rows(table, positions, out) == 0
    assert numpy.array_equal(out, bijection.reference_rows(table, positions))
    first = total // 3
    assert ((out < first) == (positions < first)).all() and (out < total).all()


def test_keys_depend_on_seed_identity_and_range():
    a = bijection.bijection_table(50, 100, 1, "a")
    assert numpy.array_equal(a, bijection.bijection_table(50, 100, 1, "a"))  # deterministic
    assert not numpy.array_equal(a[:, 2:], bijection.bijection_table(50, 100, 2, "a")[:, 2:])
    assert not numpy.array_equal(a[:, 2:], bijection.bijection_table(50, 100, 1, "b")[:, 2:])
    assert not numpy.array_equal(a[0, 2:], a[1, 2:])


def test_it_shuffles():
    """Not the identity, nor a rotation: a test that would fail on a broken network."""
    table = bijection.bijection_table(10_000, 10_000, 7, "x")
    rows = bijection.shuffle_rows(table, numpy.arange(10_000))
    assert (rows == numpy.arange(10_000)).mean() < 0.01
    steps = numpy.diff(rows)
    assert len(numpy.unique(steps)) > 5_000


@pytest.mark.parametrize("first,total", [(-1, 5), (6, 5), (0, bijection.MAX_RANGE + 1)])
def test_bad_sizes(first, total):
    with pytest.raises(ConfigError, match="first="):
        bijection.bijection_table(first, total, 0, "")


def test_array_like():
    table = bijection.bijection_table(600, 1000, 3, "array")
    shuffle = bijection.BijectionShuffle(table)
    full = numpy.asarray(shuffle)
    assert len(shuffle) == shuffle.size == shuffle.shape[0] == 1000 and shuffle.ndim == 1
    assert full.dtype == numpy.int64
    assert shuffle.item(5) == full[5] and shuffle[-1] == full[-1] and shuffle.item(-2) == full[-2]
    assert numpy.array_equal(shuffle[10:20], full[10:20])
    assert numpy.array_equal(shuffle[numpy.array([[3, 900], [0, 599]])], full[[[3, 900], [0, 599]]])
    assert shuffle == bijection.BijectionShuffle(table.copy())
    with pytest.raises(SampleIndexError, match="outside the 1000 samples"):
        shuffle.item(1000)
    with pytest.raises(SampleIndexError, match="outside"):
        shuffle[numpy.arange(990, 1010)]  # the kernel's (or reference's) check
    with pytest.raises(ConfigError, match="shape"):
        bijection.BijectionShuffle(numpy.zeros((2, 3), dtype=numpy.uint64))


def test_route():
    assert dispatch.bijection_route(1) == dispatch.REFERENCE
    assert dispatch.bijection_route(dispatch.BIJECTION_KERNEL_MIN_POSITIONS) == dispatch.KERNEL
