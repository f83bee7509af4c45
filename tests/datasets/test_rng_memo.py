"""The memoised random draws of small GPT index builds equal fresh megatron-style draws."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenloom.index.reference as reference
from tokenloom.datasets import _rng_memo
from tokenloom.datasets._gpt_indices import _seeded_random_state


def _fresh(indices, epochs, separate, seed, first_fraction):
    generator = numpy.random.RandomState(seed)
    documents = reference.build_document_index(indices, epochs, generator, separate)
    total = documents.size + 3
    first = int(total * first_fraction)
    return documents, reference.build_shuffle_index(first, total, generator), first, total


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, 50),
    epochs=st.integers(1, 4),
    separate=st.booleans(),
    seed=st.sampled_from([0, 1, 1234, 2**31 - 1]),
    offset=st.integers(0, 1000),
    first_fraction=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    repeat=st.integers(1, 3),
)
def test_memoised_draws_equal_fresh_generator(
    count, epochs, separate, seed, offset, first_fraction, repeat
):
    """Same document and shuffle index as one fresh RandomState(seed), on a miss and on
    hits (different document ids of the same count reuse the permutation)."""
    for attempt in range(repeat):
        indices = numpy.arange(offset + attempt, offset + attempt + count, dtype=numpy.int32)
        expected_docs, expected_shuffle, first, total = _fresh(
            indices, epochs, separate, seed, first_fraction
        )
        documents, draws = _rng_memo.document_index(
            indices, epochs, separate, seed, _seeded_random_state
        )
        shuffle = _rng_memo.shuffle_index(draws, first, total, _seeded_random_state)
        assert documents.dtype == expected_docs.dtype == numpy.int32
        numpy.testing.assert_array_equal(documents, expected_docs)
        assert shuffle.dtype == expected_shuffle.dtype
        numpy.testing.assert_array_equal(shuffle, expected_shuffle)


def test_returned_arrays_are_private_copies():
    """Writing into a returned index must not change later results."""
    indices = numpy.arange(10, dtype=numpy.int32)
    documents, draws = _rng_memo.document_index(indices, 2, False, 7, _seeded_random_state)
    shuffle = _rng_memo.shuffle_index(draws, 5, 6, _seeded_random_state)
    documents[:] = -1
    shuffle[:] = 0
    again_docs, again = _rng_memo.document_index(indices, 2, False, 7, _seeded_random_state)
    expected_docs, expected_shuffle, _, _ = _fresh(indices, 2, False, 7, 0.0)
    numpy.testing.assert_array_equal(again_docs, expected_docs)
    generator = numpy.random.RandomState(7)
    reference.build_document_index(indices, 2, generator, False)
    numpy.testing.assert_array_equal(
        _rng_memo.shuffle_index(again, 5, 6, _seeded_random_state),
        reference.build_shuffle_index(5, 6, generator),
    )


def test_large_and_non_int32_inputs_draw_live():
    """Inputs beyond the memo's limits use a live generator (same results)."""
    indices = numpy.arange(40, dtype=numpy.int64)
    documents, draws = _rng_memo.document_index(indices, 3, True, 99, _seeded_random_state)
    assert draws.generator is not None
    expected_docs, expected_shuffle, first, total = _fresh(indices, 3, True, 99, 0.5)
    numpy.testing.assert_array_equal(documents, expected_docs)
    numpy.testing.assert_array_equal(
        _rng_memo.shuffle_index(draws, first, total, _seeded_random_state), expected_shuffle
    )


@pytest.mark.parametrize("seed", range(40))
def test_exposed_lengths_equal_the_gather(seed):
    """plan_epochs' lengths of a split: a slice for a short contiguous range, else the
    gather; the same values either way, and an id outside the documents still raises."""
    from tokenloom.datasets._gpt_indices import _exposed_lengths

    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(0, 100, int(rng.integers(1, 400))).astype(numpy.int32)
    n = lengths.size
    start = int(rng.integers(0, n))
    end = int(rng.integers(start, n + 1))
    cases = [
        numpy.arange(start, end, dtype=numpy.int32),
        rng.permutation(numpy.arange(start, end)).astype(numpy.int64),
        rng.integers(0, n, int(rng.integers(1, 300))).astype(numpy.int32),
    ]
    for indices in cases:
        numpy.testing.assert_array_equal(_exposed_lengths(lengths, indices), lengths[indices])
    for bad in (numpy.arange(n - 2, n + 3), numpy.arange(-3, 2)):  # past the end, wrapped
        try:
            expected = lengths[bad]
        except IndexError:
            with pytest.raises(IndexError):
                _exposed_lengths(lengths, bad)
        else:
            numpy.testing.assert_array_equal(_exposed_lengths(lengths, bad), expected)
