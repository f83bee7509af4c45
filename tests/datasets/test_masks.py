"""The vectorised masks/position ids agree with megatron-core's loop (the reference)."""

from __future__ import annotations

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.datasets.masks import (
    document_boundaries,
    ltor_masks_and_position_ids,
    reference_ltor_masks_and_position_ids,
)

EOD = 2


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)
def test_fast_masks_equal_reference(tokens, flags):
    tokens = numpy.array(tokens, dtype=numpy.int64)
    fast = ltor_masks_and_position_ids(tokens, EOD, *flags)
    slow = reference_ltor_masks_and_position_ids(tokens, EOD, *flags)
    for a, b in zip(fast, slow):
        if b is None:
            assert a is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            numpy.testing.assert_array_equal(a, b)


def test_known_values():
    tokens = numpy.array([5, 2, 7, 7, 2, 9])
    attention, loss, positions = ltor_masks_and_position_ids(tokens, EOD, True, True, True, True)
    assert positions.tolist() == [0, 1, 0, 1, 2, 0]
    assert loss.tolist() == [1, 0, 1, 1, 0, 1]
    assert attention.shape == (1, 6, 6) and attention.dtype == bool
    assert attention[0, 2].tolist() == [True, True, False, True, True, True]  # doc 2 sees itself
    assert attention[0, 5].tolist() == [True] * 5 + [False]


def test_document_boundaries():
    cu, mx = document_boundaries(numpy.array([3, 10, 4]), 16)  # last part includes the extra token
    assert cu.dtype == numpy.int32 and cu.tolist() == [0, 3, 13, 16]
    assert mx.dtype == numpy.int32 and mx.shape == () and int(mx) == 10
    cu, mx = document_boundaries(numpy.array([17]), 16)
    assert cu.tolist() == [0, 16] and int(mx) == 16
