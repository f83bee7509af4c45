"""The per-split sizes of a blend over arrays (thousands of prefixes) equal megatron-core's
arithmetic done one Python float at a time (``sizes_reference``)."""

from __future__ import annotations

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.builder.sizes import get_size_per_split_per_dataset, sizes_reference


def _normalized(raw: list[float]) -> list[float]:
    total = sum(raw)
    return [w / total for w in raw]


@settings(max_examples=60, deadline=None)
@given(
    raw=st.lists(st.floats(1e-6, 1e3), min_size=64, max_size=300),
    sizes=st.lists(st.integers(0, 1 << 40), min_size=3, max_size=3),
    surplus=st.sampled_from([0, 0.0, 0.005, 0.05, 0.1, 1 / 3, 2.5]),
)
def test_array_sizes_equal_the_reference(raw, sizes, surplus):
    weights = _normalized(raw)
    assert get_size_per_split_per_dataset(weights, sizes, surplus) == sizes_reference(
        weights, sizes, surplus
    )


def test_inexact_inputs_take_the_reference():
    weights = _normalized([1.0] * 100)
    huge = [(1 << 60) + 1, 3, 0]  # not exact in float64: the reference's own rounding
    assert get_size_per_split_per_dataset(weights, huge, 0.05) == sizes_reference(
        weights, huge, 0.05
    )
    thin = [numpy.float32(w) for w in weights[:-1]] + [weights[-1]]  # not all floats
    assert get_size_per_split_per_dataset(thin, [500, 50, 20], 0.05) == sizes_reference(
        thin, [500, 50, 20], 0.05
    )
