"""The numba kernels of the document ranges (tokenloom.kernels.ranges, run by
``sample_ranges`` from 4,096 samples on and by ``blend_sample_ranges``) equal the
readable twin, sample by sample, and the numpy path (numba disabled)."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.index.ranges import blend_sample_ranges, reference_sample_ranges, sample_ranges
from tokenloom.index.reference import build_sample_index
from tokenloom.kernels import KERNELS

pytest.importorskip("numba")


@st.composite
def source(draw):
    """``(document_index, sample_index, lengths, extra)`` of a real small index."""
    lengths = numpy.array(draw(st.lists(st.integers(0, 30), min_size=1, max_size=12)))
    if lengths.sum() == 0:
        lengths[0] = 1
    epochs = draw(st.integers(1, 3))
    order = numpy.random.default_rng(draw(st.integers(0, 99))).permutation(
        numpy.tile(numpy.arange(lengths.size, dtype=numpy.int32), epochs)
    )
    extra = draw(st.integers(0, 1))
    total = int(lengths.sum()) * epochs
    seq = draw(st.integers(1, max(1, min(20, total - extra))))
    sample_index = build_sample_index(
        lengths.astype(numpy.int32), order, seq, epochs, int(lengths.sum()), True, extra
    )
    return order, sample_index, lengths.astype(numpy.int32), extra


def _expected(sources, ids, rows):
    pieces = [
        reference_sample_ranges(*sources[k][:3], int(r), sources[k][3]) for k, r in zip(ids, rows)
    ]
    counts = [piece.shape[0] for piece in pieces]
    return numpy.concatenate([[0], numpy.cumsum(counts)]), numpy.concatenate(pieces).reshape(-1, 3)


@settings(max_examples=15, deadline=None)
@given(sources=st.lists(source(), min_size=1, max_size=3), seed=st.integers(0, 2**31))
def test_kernels_equal_the_reference_and_the_numpy_path(sources, seed):
    assert KERNELS.get("ranges") is not None
    rng = numpy.random.default_rng(seed)
    n = 4096 + int(rng.integers(0, 64))  # the kernels' size
    ids = rng.integers(0, len(sources), n)
    rows = numpy.array(
        [-1 if rng.random() < 0.02 else rng.integers(0, sources[k][1].shape[0] - 1) for k in ids]
    )
    offsets, ranges = blend_sample_ranges(sources, ids, rows)
    want_offsets, want_ranges = _expected(sources, ids, rows)
    numpy.testing.assert_array_equal(offsets, want_offsets)
    numpy.testing.assert_array_equal(ranges, want_ranges)
    mine = numpy.flatnonzero(ids == 0)
    one_offsets, one_ranges = sample_ranges(*sources[0][:3], rows[mine], sources[0][3])
    want_one = _expected(sources, ids[mine], rows[mine])
    numpy.testing.assert_array_equal(one_offsets, want_one[0])
    numpy.testing.assert_array_equal(one_ranges, want_one[1])
    with pytest.MonkeyPatch.context() as patch:  # the numpy path: the same CSR
        patch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
        assert KERNELS.get("ranges") is None
        slow_offsets, slow_ranges = blend_sample_ranges(sources, ids, rows)
    numpy.testing.assert_array_equal(slow_offsets, offsets)
    numpy.testing.assert_array_equal(slow_ranges, ranges)
