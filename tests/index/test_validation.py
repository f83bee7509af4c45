"""Bad input gets a ConfigError naming the argument, never an AssertionError or a hang."""

from __future__ import annotations

import numpy
import pytest

import tokenloom.index as index
import tokenloom.index.reference as reference
from tokenloom.errors import ConfigError

IMPLS = [pytest.param(index, id="fast"), pytest.param(reference, id="reference")]
RNG = numpy.random.RandomState


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "weights, size, match",
    [
        ([0.5, 0.6], 10, "sum to 1"),
        ([1.0, 0.0], 10, r"weights\[1\] = 0.0"),
        ([1.5, -0.5], 10, r"> 0; weights\[1\]"),
        ([float("nan"), 1.0], 10, "finite"),
        ([], 10, "non-empty"),
        ([[0.5, 0.5]], 10, "1-D"),
        (["a", "b"], 10, "sequence of numbers"),
        ([0.5, 0.5], -1, "size must be >= 0"),
        ([0.5, 0.5], 2.5, "size must be an integer"),
        ([0.5, 0.5], True, "size must be an integer"),
        (numpy.full(32768, 1 / 32768), 10, "int16"),
    ],
)
def test_bad_blending_arguments(impl, weights, size, match):
    with pytest.raises(ConfigError, match=match):
        impl.build_blending_indices(weights, size)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "sizes, match",
    [
        ([], "at least one"),
        ([3, 0, 2], r"sizes\[1\] = 0"),
        ([3, -2], r"sizes\[1\] = -2"),
        ([1.5, 2], "integers"),
        (numpy.ones(32768, dtype=numpy.int64), "int16"),
    ],
)
def test_bad_exhaustive_arguments(impl, sizes, match):
    with pytest.raises(ConfigError, match=match):
        impl.build_exhaustive_blending_indices(sizes)


def test_exhaustive_accepts_integral_floats():
    expected = index.build_exhaustive_blending_indices([5, 3, 9])
    actual = index.build_exhaustive_blending_indices([5.0, 3.0, 9.0])
    numpy.testing.assert_array_equal(actual[0], expected[0])


def test_zero_samples_is_empty():
    dataset_index, sample_index = index.build_blending_indices([0.25, 0.75], 0)
    assert dataset_index.shape == sample_index.shape == (0,)
    assert dataset_index.dtype == numpy.int16


SIZES = numpy.array([5, 7, 9], dtype=numpy.int32)
DOCS = numpy.array([2, 0, 1], dtype=numpy.int32)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "args, match",
    [
        ((SIZES, DOCS[:0], 4, 1, 21), "document_index is empty"),
        ((SIZES, DOCS, 0, 1, 21), "sequence_length must be >= 1"),  # 1 works, as in megatron
        ((SIZES, DOCS, 4, 0, 21), "num_epochs must be >= 1"),
        ((SIZES, DOCS, 4, 1, 0), "tokens_per_epoch must be >= 1"),
        ((SIZES, DOCS, 4, 1, 20), "hold 21 tokens"),
        ((SIZES, DOCS, 4, 2, 21), "hold 21 tokens"),
        ((SIZES, DOCS + 1, 4, 1, 21), "outside the 3 documents"),
        ((SIZES, DOCS - 3, 4, 1, 21), "outside the 3 documents"),
        ((-SIZES, DOCS, 4, 1, 21), "negative length"),
        ((SIZES, DOCS.reshape(3, 1), 4, 1, 21), "1-D"),
        ((SIZES, DOCS, 4, 1, 21, "yes"), "drop_last_partial_sequence"),
        ((SIZES, DOCS, 4, 1, 21, True, 2), "add_extra_token_to_sequence"),
    ],
)
def test_bad_sample_index_arguments(impl, args, match):
    with pytest.raises(ConfigError, match=match):
        impl.build_sample_index(*args)


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_last_document_cannot_end_a_partial_sample(impl):
    sizes = numpy.array([10, 0], dtype=numpy.int32)
    with pytest.raises(ConfigError, match="negative offset"):
        impl.build_sample_index(sizes, numpy.array([0, 1], numpy.int32), 4, 1, 10, False, 1)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "args, match",
    [
        ((numpy.arange(3), 0, RNG(1), False), "num_epochs must be >= 1"),
        ((numpy.arange(3), 1, numpy.random.default_rng(1), False), "RandomState"),
        ((numpy.array([-1, 2]), 1, RNG(1), False), "ids in"),
        ((numpy.array([2**31, 2]), 1, RNG(1), False), "ids in"),
        ((numpy.array([0.5]), 1, RNG(1), False), "integers"),
    ],
)
def test_bad_document_index_arguments(impl, args, match):
    with pytest.raises(ConfigError, match=match):
        impl.build_document_index(*args)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "args, match",
    [
        ((5, 4, RNG(1)), "must not exceed"),
        ((-1, 4, RNG(1)), "num_samples must be >= 0"),
        ((1, 4, None), "RandomState"),
    ],
)
def test_bad_shuffle_index_arguments(impl, args, match):
    with pytest.raises(ConfigError, match=match):
        impl.build_shuffle_index(*args)
