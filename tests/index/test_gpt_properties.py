"""Fast GPT index builders agree exactly with the readable references."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenloom.index as index
import tokenloom.index.reference as reference
from tokenloom.errors import ConfigError

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sample_inputs(draw):
    """Document lengths, a shuffled multi-epoch document index and cutting arguments."""
    rng = numpy.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    num_docs = draw(st.integers(1, 60))
    low = draw(st.sampled_from([0, 1, 2]))
    sizes = rng.integers(low, draw(st.integers(low + 1, 300)), num_docs).astype(numpy.int32)
    if sizes.sum() < 2:
        sizes[0] = 2
    epochs = draw(st.integers(1, 4))
    documents = numpy.tile(numpy.arange(num_docs, dtype=numpy.int32), epochs)
    rng.shuffle(documents)
    seq = draw(st.integers(2, 200))
    drop_last = draw(st.booleans())
    extra = draw(st.sampled_from([0, 1, True, False]))
    return sizes, documents, seq, epochs, int(sizes.sum()), drop_last, extra


def _both(args):
    try:
        expected = reference.build_sample_index(*args)
    except ConfigError:
        with pytest.raises(ConfigError):
            index.build_sample_index(*args)
        return None, None
    return index.build_sample_index(*args), expected


@SETTINGS
@given(args=sample_inputs())
def test_sample_index_equals_reference(args):
    actual, expected = _both(args)
    if expected is None:
        return
    assert actual.dtype == expected.dtype == numpy.int32
    numpy.testing.assert_array_equal(actual, expected)
    sizes, documents, seq, epochs, tokens, drop_last, extra = args
    assert actual.shape == (_num_samples(epochs * tokens, seq, int(extra), drop_last) + 1, 2)


@SETTINGS
@given(args=sample_inputs())
def test_vectorized_sample_index_equals_reference(args):
    """The cumulative-sum path (short document indices) against the reference loop,
    errors included."""
    from tokenloom.index.sample import build_sample_index_vectorized

    try:
        expected = reference.build_sample_index(*args)
    except ConfigError as error:
        with pytest.raises(ConfigError) as raised:
            build_sample_index_vectorized(*args)
        assert str(raised.value) == str(error)
        return
    actual = build_sample_index_vectorized(*args)
    assert actual.dtype == expected.dtype
    numpy.testing.assert_array_equal(actual, expected)


@SETTINGS
@given(args=sample_inputs())
def test_small_sample_index_equals_reference(args):
    """The Python-integer path (document indices of up to a few hundred documents)
    against the reference loop, errors included (the same messages)."""
    from tokenloom.index.sample import build_sample_index_small

    try:
        expected = reference.build_sample_index(*args)
    except ConfigError as error:
        with pytest.raises(ConfigError) as raised:
            build_sample_index_small(*args)
        assert str(raised.value) == str(error)
        return
    actual = build_sample_index_small(*args)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    numpy.testing.assert_array_equal(actual, expected)


@SETTINGS
@given(args=sample_inputs())
def test_numba_sample_index_equals_reference(args):
    """The numba kernel itself (short inputs take the vectorized path by default)."""
    from tokenloom.index._common import sample_index_plan
    from tokenloom.index.sample import _fast_sample_index
    from tokenloom.kernels import KERNELS

    fast = KERNELS.get("sample_index")
    if fast is None:
        pytest.skip("numba is not installed")
    run = lambda: _fast_sample_index(fast, sample_index_plan(*args, check_values=False))  # noqa: E731
    try:
        expected = reference.build_sample_index(*args)
    except ConfigError:
        with pytest.raises(ConfigError):
            run()
        return
    numpy.testing.assert_array_equal(run(), expected)


def test_long_document_indices_use_the_kernel_path(monkeypatch):
    """Above the vectorized limit the numba (or reference) path runs: same output."""
    from tokenloom.index import dispatch
    from tokenloom.index.sample import build_sample_index_vectorized

    monkeypatch.setattr(dispatch, "SAMPLE_VECTORIZED_MAX_DOCUMENTS", 4096)
    VECTORIZED_MAX_DOCUMENTS = dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS

    rng = numpy.random.default_rng(5)
    sizes = rng.integers(0, 50, 3000).astype(numpy.int32)
    documents = numpy.tile(numpy.arange(3000, dtype=numpy.int32), 2)
    rng.shuffle(documents)
    assert documents.size > VECTORIZED_MAX_DOCUMENTS
    args = (sizes, documents, 64, 2, int(sizes.sum()), False, 1)
    expected = reference.build_sample_index(*args)
    numpy.testing.assert_array_equal(index.build_sample_index(*args), expected)
    numpy.testing.assert_array_equal(build_sample_index_vectorized(*args), expected)


def _num_samples(total, seq, extra, drop_last):
    if drop_last:
        return (total - extra) // seq
    return int(numpy.ceil(numpy.float32(total - extra) / numpy.float32(seq)))


def test_samples_cover_sequence_length_tokens():
    """Each sample spans sequence_length + extra tokens of the concatenated documents."""
    rng = numpy.random.default_rng(0)
    sizes = rng.integers(1, 90, 500).astype(numpy.int32)
    documents = rng.permutation(500).astype(numpy.int32)
    out = index.build_sample_index(sizes, documents, 64, 1, int(sizes.sum()), True, 1)
    starts = numpy.concatenate(([0], numpy.cumsum(sizes[documents], dtype=numpy.int64)))
    flat = starts[out[:, 0]] + out[:, 1]
    numpy.testing.assert_array_equal(numpy.diff(flat), 64)


def test_sample_index_int64_when_lengths_exceed_int32():
    sizes = numpy.array([2**31 - 1, 5], dtype=numpy.int64) + numpy.array([1, 0])
    documents = numpy.array([1, 0, 1], dtype=numpy.int32)
    args = (sizes, documents, 2**30, 1, int(sizes[documents].sum()), True, 1)
    actual, expected = index.build_sample_index(*args), reference.build_sample_index(*args)
    assert actual.dtype == expected.dtype == numpy.int64
    numpy.testing.assert_array_equal(actual, expected)


@SETTINGS
@given(
    num_docs=st.integers(0, 300),
    epochs=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    separate=st.booleans(),
    offset=st.integers(0, 1000),
)
def test_document_index_equals_reference(num_docs, epochs, seed, separate, offset):
    documents = numpy.arange(offset, offset + num_docs, dtype=numpy.int64)
    rng_fast, rng_ref = numpy.random.RandomState(seed), numpy.random.RandomState(seed)
    actual = index.build_document_index(documents, epochs, rng_fast, separate)
    expected = reference.build_document_index(documents, epochs, rng_ref, separate)
    assert actual.dtype == expected.dtype == numpy.int32
    numpy.testing.assert_array_equal(actual, expected)
    assert rng_fast.randint(2**31) == rng_ref.randint(2**31)  # same draws consumed


@SETTINGS
@given(
    num_samples=st.integers(0, 3000),
    extra=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
)
def test_shuffle_index_equals_reference(num_samples, extra, seed):
    rng_fast, rng_ref = numpy.random.RandomState(seed), numpy.random.RandomState(seed)
    actual = index.build_shuffle_index(num_samples, num_samples + extra, rng_fast)
    expected = reference.build_shuffle_index(num_samples, num_samples + extra, rng_ref)
    assert actual.dtype == expected.dtype == numpy.uint32
    numpy.testing.assert_array_equal(actual, expected)
    numpy.testing.assert_array_equal(numpy.sort(actual[:num_samples]), numpy.arange(num_samples))
    assert rng_fast.randint(2**31) == rng_ref.randint(2**31)


@pytest.mark.parametrize(
    "tokens, samples, seq, extra, expected",
    [
        (100, 0, 10, 1, 1),
        (100, 9, 11, 1, 1),
        (100, 9, 11, 0, 1),
        (100, 10, 10, 1, 2),
        (7, 5, 3, 1, 3),
    ],
)
def test_num_epochs_needed_matches_megatron_loop(tokens, samples, seq, extra, expected):
    epochs, total = 1, tokens
    while total < samples * seq + extra:  # megatron-core's loop
        epochs, total = epochs + 1, total + tokens
    assert epochs == expected == index.num_epochs_needed(tokens, samples, seq, extra)


def test_num_epochs_needed_refuses_empty_split():
    with pytest.raises(ConfigError, match="no token"):
        index.num_epochs_needed(0, 3, 64, 1)
    assert index.num_epochs_needed(0, 0, 64, 0) == 1


@pytest.mark.parametrize(
    "sizes, documents",
    [
        ([3, 4, 5], [0, 3, 1]),  # an id past the documents
        ([3, 4, 5], [0, -1, 1]),  # a negative id
        ([3, -4, 5], [0, 1, 2]),  # a negative length
    ],
)
def test_small_sample_index_reports_bad_documents_as_the_vectorized_path(sizes, documents):
    from tokenloom.index.sample import build_sample_index_small, build_sample_index_vectorized

    args = (numpy.array(sizes, numpy.int32), numpy.array(documents, numpy.int32), 4, 1, 12, True, 1)
    with pytest.raises(ConfigError) as vectorized:
        build_sample_index_vectorized(*args)
    with pytest.raises(ConfigError) as small:
        build_sample_index_small(*args)
    assert str(small.value) == str(vectorized.value)


def test_small_sample_index_hands_many_samples_to_the_vectorized_path(monkeypatch):
    """A few long documents cut into many samples: a Python step per sample would be
    slow, so past SAMPLE_SMALL_MAX_SAMPLES the cumulative sums run (the same output)."""
    import tokenloom.index.sample as sample
    from tokenloom.index import dispatch

    calls = []
    vectorized = sample.build_sample_index_vectorized
    monkeypatch.setattr(
        sample,
        "build_sample_index_vectorized",
        lambda *args: calls.append(1) or vectorized(*args),
    )
    sizes = numpy.array([9000, 7000, 11000], numpy.int32)
    documents = numpy.array([2, 0, 1, 1, 0, 2], numpy.int32)
    for seq, handed in ((4, True), (4096, False)):
        args = (sizes, documents, seq, 2, int(sizes.sum()), True, 1)
        assert dispatch.sample_index_route(documents) == dispatch.SMALL
        calls.clear()
        actual = index.build_sample_index(*args)
        numpy.testing.assert_array_equal(actual, reference.build_sample_index(*args))
        assert bool(calls) == handed
        assert (actual.shape[0] - 1 > dispatch.SAMPLE_SMALL_MAX_SAMPLES) == handed
