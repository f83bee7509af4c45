"""The numba shuffle kernel is numpy's legacy ``RandomState.shuffle``, bit for bit:
same permutation and the same generator state (so the same later draws)."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenloom.index as index
import tokenloom.index.reference as reference
from tokenloom.index import dispatch
from tokenloom.index.shuffle import legacy_shuffle
from tokenloom.kernels import KERNELS

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LENGTHS = st.one_of(
    st.sampled_from([0, 1, 2, 3, 623, 624, 625, 1000, 8191, 8192, 8193]),
    st.integers(0, 5000),
)
LONG = 2 * dispatch.SHUFFLE_KERNEL_MIN_SIZE  # long enough for the kernel route
DTYPES = st.sampled_from(["int32", "int64", "uint32"])


@pytest.fixture(scope="module")
def kernel():
    fast = KERNELS.get("shuffle")
    if fast is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    return fast


def _generator(seed: int, draws: int, gauss: bool) -> numpy.random.RandomState:
    """A generator advanced to an arbitrary position (and maybe holding a gauss)."""
    rs = numpy.random.RandomState(seed)
    rs.randint(0, 2**31, size=draws)
    if gauss:
        rs.standard_normal()  # leaves has_gauss=1 and a cached value
    return rs


def _assert_same_state(a: numpy.random.RandomState, b: numpy.random.RandomState) -> None:
    sa, sb = a.get_state(legacy=False), b.get_state(legacy=False)
    numpy.testing.assert_array_equal(sa["state"]["key"], sb["state"]["key"])
    assert sa["state"]["pos"] == sb["state"]["pos"]
    assert (sa["has_gauss"], sa["gauss"]) == (sb["has_gauss"], sb["gauss"])
    assert a.standard_normal() == b.standard_normal()
    numpy.testing.assert_array_equal(a.randint(0, 2**31, 50), b.randint(0, 2**31, 50))


def _state_arrays(rs: numpy.random.RandomState):
    state = rs.get_state(legacy=False)["state"]
    return state["key"].copy(), numpy.array([state["pos"]], dtype=numpy.int64)


def _run_kernel(function, rs, x, *args):
    """Run ``function(x, key, pos, *args)`` (no ``x`` when None) on ``rs``'s state and
    write the advanced state back."""
    key, pos = _state_arrays(rs)
    result = function(key, pos, *args) if x is None else function(x, key, pos, *args)
    state = rs.get_state(legacy=False)
    state["state"] = {"key": key, "pos": int(pos[0])}
    rs.set_state(state)
    return result


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    draws=st.integers(0, 1500),
    gauss=st.booleans(),
    n=LENGTHS,
    dtype=DTYPES,
    block=st.sampled_from([1, 2, 7, 64, 256]),
)
def test_kernel_shuffles_like_numpy(kernel, seed, draws, gauss, n, dtype, block):
    expected_rs, rs = _generator(seed, draws, gauss), _generator(seed, draws, gauss)
    values = numpy.random.default_rng(seed).integers(-(2**31), 2**31, n).astype(dtype)
    expected, actual = values.copy(), values.copy()
    expected_rs.shuffle(expected)
    _run_kernel(kernel.shuffle, rs, actual, block)
    numpy.testing.assert_array_equal(actual, expected)
    _assert_same_state(expected_rs, rs)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), draws=st.integers(0, 700), n=st.integers(0, 1500))
def test_plain_steps_shuffle_like_numpy(kernel, seed, draws, n):
    """The one-step-at-a-time path (used for 64-bit intervals) is numpy's loop too."""
    expected_rs, rs = _generator(seed, draws, False), _generator(seed, draws, False)
    expected, actual = numpy.arange(n, dtype=numpy.int64), numpy.arange(n, dtype=numpy.int64)
    expected_rs.shuffle(expected)
    assert _run_kernel(kernel.plain_steps, rs, actual, 0) == min(n - 1, 0)
    numpy.testing.assert_array_equal(actual, expected)
    _assert_same_state(expected_rs, rs)


def _random_interval(rs: numpy.random.RandomState, maximum: int) -> int:
    """numpy's legacy random_interval spelled out, from full-range 64-bit draws."""
    mask = (1 << maximum.bit_length()) - 1
    while True:
        value = int(rs.randint(0, 2**64, dtype=numpy.uint64)) & mask  # one next_uint64
        if value <= maximum:
            return value


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    draws=st.integers(0, 1300),
    maximum=st.one_of(
        st.sampled_from([2**32, 2**32 + 1, 3 << 40, 2**63 - 1, 2**64 - 1]),
        st.integers(2**32, 2**64 - 1),
    ),
)
def test_random_interval_64_bit_branch(kernel, seed, draws, maximum):
    expected_rs, rs = _generator(seed, draws, False), _generator(seed, draws, False)
    expected = [_random_interval(expected_rs, maximum) for _ in range(5)]
    top = numpy.uint64(maximum)
    actual = [int(_run_kernel(kernel.random_interval, rs, None, top)) for _ in range(5)]
    assert actual == expected
    _assert_same_state(expected_rs, rs)


def test_next_uint64_is_high_word_first(kernel):
    rs = numpy.random.RandomState(7)
    key, pos = _state_arrays(rs)
    first, second = int(kernel.next_uint32(key, pos)), int(kernel.next_uint32(key, pos))
    assert int(numpy.random.RandomState(7).randint(0, 2**64, dtype=numpy.uint64)) == (
        first << 32 | second
    )


def test_random_interval_zero_draws_nothing(kernel):
    rs = numpy.random.RandomState(3)
    key, pos = _state_arrays(rs)
    assert kernel.random_interval(key, pos, 0) == 0 and pos[0] == 624


@pytest.fixture
def spy(kernel, monkeypatch):
    """Count the kernel's shuffles (it still does the work)."""
    calls = []
    real = kernel.shuffle

    def counting(*args):
        calls.append(args[0].shape[0])
        return real(*args)

    monkeypatch.setattr(kernel, "shuffle", counting)
    return calls


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 2**32 - 1),
    draws=st.integers(0, 1500),
    gauss=st.booleans(),
    n=st.integers(0, 3000),
    dtype=st.sampled_from(["int32", "int64", "uint32", "int8", "uint16", "float64", ">i4"]),
)
def test_legacy_shuffle_equals_numpy(monkeypatch, spy, seed, draws, gauss, n, dtype):
    monkeypatch.setattr(dispatch, "SHUFFLE_KERNEL_MIN_SIZE", 0)
    spy.clear()
    expected_rs, rs = _generator(seed, draws, gauss), _generator(seed, draws, gauss)
    values = numpy.random.default_rng(seed).normal(size=n) * 100
    expected, actual = values.astype(dtype), values.astype(dtype)
    expected_rs.shuffle(expected)
    legacy_shuffle(rs, actual)
    assert spy == [n]
    numpy.testing.assert_array_equal(actual, expected)
    _assert_same_state(expected_rs, rs)


def _odd_inputs():
    base = numpy.arange(2 * dispatch.SHUFFLE_KERNEL_MIN_SIZE + 8, dtype=numpy.int64)  # long
    read_only = base.copy()
    read_only.flags.writeable = False
    return {
        "strided": base.copy()[::2],
        "2-D": base.copy().reshape(-1, 4),
        "object": base.astype(object),
        "list": list(range(100)),
        "short": base[:100].copy(),
        "read-only": read_only,
        "16-byte": base.astype(numpy.complex128),
    }


@pytest.mark.parametrize("name", sorted(_odd_inputs()))
def test_legacy_shuffle_falls_back_to_numpy(spy, name):
    expected, actual = _odd_inputs()[name], _odd_inputs()[name]
    expected_rs, rs = numpy.random.RandomState(5), numpy.random.RandomState(5)
    try:
        expected_rs.shuffle(expected)
    except ValueError as exc:  # read-only: the same error from the same place
        with pytest.raises(ValueError, match=str(exc)):
            legacy_shuffle(rs, actual)
    else:
        legacy_shuffle(rs, actual)
        numpy.testing.assert_array_equal(numpy.asarray(actual), numpy.asarray(expected))
    assert spy == []
    _assert_same_state(expected_rs, rs)


def test_other_bit_generator_falls_back(spy):
    expected, actual = numpy.arange(LONG), numpy.arange(LONG)
    numpy.random.RandomState(numpy.random.PCG64(9)).shuffle(expected)
    legacy_shuffle(numpy.random.RandomState(numpy.random.PCG64(9)), actual)
    numpy.testing.assert_array_equal(actual, expected)
    assert spy == []


def test_disabled_numba_uses_numpy(monkeypatch, spy):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    expected, actual = numpy.arange(LONG), numpy.arange(LONG)
    numpy.random.RandomState(4).shuffle(expected)
    legacy_shuffle(numpy.random.RandomState(4), actual)
    numpy.testing.assert_array_equal(actual, expected)
    assert spy == []


@pytest.mark.parametrize("epochs, separate", [(1, False), (3, False), (3, True)])
def test_large_gpt_indices_equal_reference(monkeypatch, spy, epochs, separate):
    """Document and shuffle indices long enough for the kernel equal the references."""
    monkeypatch.setattr(dispatch, "SHUFFLE_KERNEL_MIN_SIZE", 8192)  # every array here
    documents = numpy.arange(3, 30_003, dtype=numpy.int32)
    expected_rs, rs = numpy.random.RandomState(1234), numpy.random.RandomState(1234)
    expected = reference.build_document_index(documents, epochs, expected_rs, separate)
    actual = index.build_document_index(documents, epochs, rs, separate)
    numpy.testing.assert_array_equal(actual, expected)
    assert actual.dtype == expected.dtype
    expected = reference.build_shuffle_index(50_000, 70_000, expected_rs)
    actual = index.build_shuffle_index(50_000, 70_000, rs)
    numpy.testing.assert_array_equal(actual, expected)
    assert actual.dtype == expected.dtype and len(spy) >= 3
    _assert_same_state(expected_rs, rs)
