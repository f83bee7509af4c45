"""The one validator: sample positions, and GPT / blended index arrays (fast == a
readable per-sample check, on random valid and corrupted indices)."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenloom.index as index
from tokenloom.errors import CacheError
from tokenloom.index.validate import (
    check_blended_indices,
    check_gpt_indices,
    sample_position,
    sample_rows,
)


def test_sample_position_and_rows():
    assert sample_position(3, 5) == 3 and sample_position(-1, 5) == 4
    assert sample_position(numpy.int16(2), 5) == 2 and sample_position(True, 5) == 1
    for bad in (5, -6, 2**70):
        with pytest.raises(IndexError, match="out of range for 5 samples"):
            sample_position(bad, 5)
    for bad in (1.0, "1", [1]):
        with pytest.raises(TypeError, match="sample index must be an integer"):
            sample_position(bad, 5)
    numpy.testing.assert_array_equal(sample_rows([0, None, -1], 4), [0, -1, 3])


def _gpt(seed: int, seq: int, extra: int, drop_last: bool):
    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(1, 30, 50).astype(numpy.int32)
    documents = rng.permutation(numpy.tile(numpy.arange(50, dtype=numpy.int32), 2))
    tokens = int(lengths.sum())
    sample = index.build_sample_index(lengths, documents, seq, 2, tokens, drop_last, extra)
    shuffle = rng.permutation(sample.shape[0] - 1).astype(numpy.uint32)
    return lengths, documents, sample, shuffle


def _readable_check(lengths, documents, sample, shuffle, seq, extra) -> bool:
    """Per sample, in plain Python: every part inside its document, ``seq`` tokens."""
    if not all(0 <= d < lengths.size for d in documents.tolist()):
        return False
    if not all(0 <= r < sample.shape[0] - 1 for r in shuffle.tolist()):
        return False
    sizes = []
    for j in range(sample.shape[0] - 1):
        (b, bo), (e, eo) = sample[j].tolist(), sample[j + 1].tolist()
        if not (0 <= b <= e < documents.size) or bo < 0 or eo < 0 or (b == e and eo < bo):
            return False
        if bo > lengths[documents[b]] or eo + extra > lengths[documents[e]]:
            return False
        sizes.append(int(lengths[documents[b:e]].sum()) - bo + eo)
    short = [k for k, s in enumerate(sizes) if s < seq]
    tail_ok = not short or all(s == 0 for s in sizes[short[0] + 1 :])
    return all(s <= seq for s in sizes) and tail_ok


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    seq=st.integers(2, 40),
    extra=st.integers(0, 1),
    drop_last=st.booleans(),
    corrupt=st.integers(0, 5),
    where=st.integers(0, 10**6),
    value=st.integers(-3, 10**4),
)
def test_gpt_check_equals_the_readable_check(seed, seq, extra, drop_last, corrupt, where, value):
    lengths, documents, sample, shuffle = _gpt(seed, seq, extra, drop_last)
    target = (documents, sample[:, 0], sample[:, 1], shuffle, None, None)[corrupt]
    if target is not None and target.size:
        target[where % target.size] = value % (2**31) if target.dtype.kind == "u" else value
    expected = _readable_check(lengths, documents, sample, shuffle, seq, extra)
    try:
        check_gpt_indices(documents, sample, shuffle, lengths, seq, extra, shuffle.size, "t")
    except CacheError as error:
        assert not expected, error
        assert "t: " in str(error)
    else:
        assert expected


def test_gpt_check_refuses_wrong_shapes_and_counts():
    lengths, documents, sample, shuffle = _gpt(1, 8, 1, True)
    with pytest.raises(CacheError, match="shape"):
        check_gpt_indices(documents, sample[:, 0], shuffle, lengths, 8, 1, shuffle.size, "x")
    with pytest.raises(CacheError, match="dataset has"):
        check_gpt_indices(documents, sample, shuffle, lengths, 8, 1, shuffle.size + 1, "x")


def test_blended_check():
    ids = numpy.array([0, 1, 1, 0], dtype=numpy.int16)
    rows = numpy.array([0, 0, 1, 1], dtype=numpy.int64)
    check_blended_indices(ids, rows, [2, 2], 4, "b")
    with pytest.raises(CacheError, match=r"dataset_index\[1\] = 1 is not one of the 1"):
        check_blended_indices(ids, rows, [2], 4, "b")
    with pytest.raises(CacheError, match=r"dataset_sample_index\[2\] = 1 is not one of the 1"):
        check_blended_indices(ids, rows, [2, 1], 4, "b")
    with pytest.raises(CacheError, match="the blend has 5"):
        check_blended_indices(ids, rows, [2, 2], 5, "b")
