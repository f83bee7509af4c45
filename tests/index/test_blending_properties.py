"""The fast blending kernels agree exactly with the plain greedy scan and the reference.

``kernels.blend_fast.run`` is driven with tiny ``target``/``period`` values too, so that the
level, fallback and rebuild paths all run on small inputs.
"""

from __future__ import annotations

import numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.index.index_strategies import blend_weights, normalise

import tokenloom.index as index
import tokenloom.index.reference as reference

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TUNING = st.one_of(st.none(), st.tuples(st.integers(1, 40), st.integers(1, 300)))


def _scan(kernels, weights, size):
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    sample_index = numpy.empty(size, dtype=numpy.int64)
    kernels.blend_scan(weights, dataset_index, sample_index)
    return dataset_index, sample_index


def _fast(fast, weights, sizes, size, tuning):
    dataset_index = numpy.empty(size, dtype=numpy.int16)
    sample_index = numpy.empty(size, dtype=numpy.int64)
    target, period = tuning if tuning else (None, None)
    fast.run(weights, sizes, dataset_index, sample_index, target, period)
    return dataset_index, sample_index


def _assert_same(actual, expected):
    numpy.testing.assert_array_equal(actual[0], expected[0])
    numpy.testing.assert_array_equal(actual[1], expected[1])


@SETTINGS
@given(weights=blend_weights(), size=st.integers(0, 3000), tuning=TUNING)
def test_fast_blend_equals_scan(compiled, weights, size, tuning):
    fast, kernels = compiled
    empty = numpy.empty(0, dtype=numpy.int64)
    _assert_same(_fast(fast, weights, empty, size, tuning), _scan(kernels, weights, size))


@settings(max_examples=25, deadline=None)
@given(weights=blend_weights(max_datasets=40), size=st.integers(0, 400))
def test_public_blend_equals_reference(weights, size):
    _assert_same(
        index.build_blending_indices(weights, size),
        reference.build_blending_indices(weights, size),
    )


@SETTINGS
@given(weights=blend_weights(max_datasets=200), size=st.integers(0, 1500))
def test_numpy_blend_equals_reference(weights, size):
    """The buffered numpy scan (small blends before numba is loaded) is the reference's."""
    from tokenloom.index.blending import build_blending_indices_numpy

    _assert_same(
        build_blending_indices_numpy(weights, size), reference.build_blending_indices(weights, size)
    )


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=80).map(numpy.array),
    tuning=TUNING,
)
def test_fast_exhaustive_equals_scan(compiled, sizes, tuning):
    fast, kernels = compiled
    sizes = sizes.astype(numpy.int64)
    total = int(sizes.sum())
    weights = sizes.astype(numpy.float64) / float(total)
    expected = (numpy.empty(total, numpy.int16), numpy.empty(total, numpy.int64))
    kernels.exhaustive_scan(sizes, weights, *expected)
    _assert_same(_fast(fast, weights, sizes, total, tuning), expected)
    numpy.testing.assert_array_equal(numpy.bincount(expected[0], minlength=sizes.size), sizes)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=60))
def test_public_exhaustive_equals_reference(sizes):
    _assert_same(
        index.build_exhaustive_blending_indices(sizes),
        reference.build_exhaustive_blending_indices(sizes),
    )


def test_many_datasets_long_run(compiled):
    """2,000 datasets, 60,000 samples: plenty of rebuilds and queue wrap-arounds."""
    fast, kernels = compiled
    rng = numpy.random.default_rng(7)
    for raw in (rng.random(2000) + 0.01, numpy.ones(2000), rng.zipf(1.5, 2000).astype(float)):
        weights = normalise(raw)
        _assert_same(index.build_blending_indices(weights, 60_000), _scan(kernels, weights, 60_000))


def test_scan_kernel_equals_reference(compiled):
    _, kernels = compiled
    weights = normalise(numpy.random.default_rng(3).random(37) + 0.1)
    _assert_same(_scan(kernels, weights, 2000), reference.build_blending_indices(weights, 2000))


def test_blend_prefix_property():
    """Every prefix of the blend follows the weights to within a couple of samples."""
    weights = normalise(numpy.arange(1, 65, dtype=numpy.float64))
    dataset_index, sample_index = index.build_blending_indices(weights, 50_000)
    counts = numpy.zeros(weights.size, dtype=numpy.int64)
    for t in (100, 1000, 10_000, 50_000):
        counts = numpy.bincount(dataset_index[:t], minlength=weights.size)
        assert numpy.abs(counts - weights * t).max() < 2.0
    # dataset_sample_index counts up per dataset
    for d in (0, 31, 63):
        numpy.testing.assert_array_equal(sample_index[dataset_index == d], numpy.arange(counts[d]))


def test_rarely_due_datasets_go_through_the_far_queue(compiled):
    """Weights ~1.2e-4 come due ~8,000 steps ahead, beyond the 4,096-step bucket ring."""
    _, kernels = compiled
    weights = normalise(numpy.concatenate((numpy.full(8, 0.01), numpy.linspace(1, 2, 56))))
    actual = index.build_blending_indices(weights, 120_000)
    _assert_same(actual, _scan(kernels, weights, 120_000))
    assert numpy.count_nonzero(actual[0] < 8) > 80


def test_equal_weight_groups_are_served_round_robin(compiled):
    fast, _ = compiled
    weights = normalise(numpy.array([3.0, 1.0, 3.0, 1.0, 3.0] * 10))
    groups = fast.group_datasets(weights, numpy.empty(0, dtype=numpy.int64))
    assert list(groups[2]) == [20, 30]  # members of the weight-1 and weight-3 groups
    heavy = numpy.flatnonzero(weights == weights.max())
    dataset_index, _ = index.build_blending_indices(weights, 5_000)
    order = dataset_index[numpy.isin(dataset_index, heavy)]
    numpy.testing.assert_array_equal(order[: 3 * heavy.size], numpy.tile(heavy, 3))


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.integers(-4, 4).map(float), st.floats(-1e6, 1e6, allow_nan=False)),
        min_size=1,
        max_size=80,
    ),
    data=st.data(),
)
def test_select_equals_numpy_partition(compiled, values, data):
    """The rebuild's quickselect picks numpy.partition's k-th value (ties included)."""
    fast, _ = compiled
    array = numpy.array(values, dtype=numpy.float64)
    k = data.draw(st.integers(0, array.size - 1))
    expected = numpy.partition(array.copy(), k)[k]
    scratch = numpy.concatenate((array, numpy.full(3, numpy.nan)))  # only [:count] is read
    assert fast.select(scratch, array.size, k) == expected
    assert sorted(scratch[: array.size]) == sorted(array)  # reordered, nothing lost


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_subnormal=True),
            st.sampled_from([0.0, -0.0, numpy.inf, -numpy.inf, 5e-324, -5e-324, 1.0, -1.0]),
        ),
        min_size=2,
        max_size=40,
    )
)
def test_ordered_bits_sort_as_the_floats(compiled, values):
    """The active set's maximum is taken on int64 bits that order as the float64 errors
    (equal floats give equal bits: the tie-break on ids sees exactly megatron's ties)."""
    fast, _ = compiled
    keys = [int(fast.ordered(v)) for v in values]
    for a, ka in zip(values, keys):
        for b, kb in zip(values, keys):
            assert (a < b) == (ka < kb) and (a == b) == (ka == kb)


@settings(max_examples=40, deadline=None)
@given(
    numerators=st.lists(st.integers(1, 7), min_size=2, max_size=12),
    shift=st.integers(0, 3),
    scale=st.sampled_from([1.0, 1.0 - 2.0**-40]),
    size=st.integers(1, 600),
)
def test_fast_blend_when_no_error_is_positive(compiled, numerators, shift, scale, size):
    """Dyadic weights with every dataset active (``target`` > datasets: level -inf).
    Where ``w * s`` is whole for every dataset all errors are exactly 0.0 (weights
    summing to 1.0) or all slightly negative (weights scaled by ``1 - 2**-40``): the
    active set's maximum is not a positive float, so the kernel orders the errors by
    their order-preserving bits (raw bits sort negative floats backwards); the scan
    decides the same samples, the all-way tie at 0.0 included."""
    fast, kernels = compiled
    raw = numpy.array(numerators, dtype=numpy.float64)
    total = 2.0 ** int(numpy.ceil(numpy.log2(raw.sum())) + shift)
    weights = numpy.append(raw / total, 1.0 - raw.sum() / total)  # sums to exactly 1.0
    weights = weights[weights > 0] * scale
    empty = numpy.empty(0, dtype=numpy.int64)
    expected = _scan(kernels, weights, size)
    _assert_same(_fast(fast, weights, empty, size, (weights.size + 1, 10_000)), expected)
    _assert_same(_fast(fast, weights, empty, size, (1, 7)), expected)
