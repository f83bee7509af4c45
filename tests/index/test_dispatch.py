"""The dispatch table: every route of every builder gives the reference's output, and
the route is a function of the inputs alone."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.index.index_strategies import blend_weights

import tokenloom.index as index
import tokenloom.index.reference as reference
from tokenloom.index import dispatch

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# (BLEND_NUMPY_MAX_WORK, BLEND_SCAN_BELOW) forcing each blending route
BLEND_ROUTES = {dispatch.NUMPY: (10**18, 24), dispatch.SCAN: (-1, 10**6), dispatch.FAST: (-1, 0)}


def _same(actual, expected):
    for a, b in zip(actual, expected):
        assert a.dtype == b.dtype
        numpy.testing.assert_array_equal(a, b)


@SETTINGS
@given(
    weights=blend_weights(max_datasets=60),
    size=st.integers(0, 800),
    route=st.sampled_from(sorted(BLEND_ROUTES)),
)
def test_every_blending_route_equals_the_reference(monkeypatch, weights, size, route):
    work, below = BLEND_ROUTES[route]
    monkeypatch.setattr(dispatch, "BLEND_NUMPY_MAX_WORK", work)
    monkeypatch.setattr(dispatch, "BLEND_SCAN_BELOW", below)
    assert dispatch.blending_route(len(weights), size) == route
    _same(
        index.build_blending_indices(weights, size), reference.build_blending_indices(weights, size)
    )


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=50),
    route=st.sampled_from([dispatch.REFERENCE, dispatch.SCAN, dispatch.FAST]),
)
def test_every_exhaustive_route_equals_the_reference(monkeypatch, sizes, route):
    work, below = {
        dispatch.REFERENCE: (10**18, 24),
        dispatch.SCAN: (-1, 10**6),
        dispatch.FAST: (-1, 0),
    }[route]
    monkeypatch.setattr(dispatch, "BLEND_NUMPY_MAX_WORK", work)
    monkeypatch.setattr(dispatch, "BLEND_SCAN_BELOW", below)
    assert dispatch.exhaustive_route(len(sizes), sum(sizes)) == route
    _same(
        index.build_exhaustive_blending_indices(sizes),
        reference.build_exhaustive_blending_indices(sizes),
    )


@pytest.mark.parametrize("limit", [10**9, 0])  # vectorized, kernel
def test_both_sample_index_routes_equal_the_reference(monkeypatch, limit):
    monkeypatch.setattr(dispatch, "SAMPLE_VECTORIZED_MAX_DOCUMENTS", limit)
    rng = numpy.random.default_rng(limit % 7)
    sizes = rng.integers(1, 40, 300).astype(numpy.int32)
    documents = rng.permutation(numpy.tile(numpy.arange(300, dtype=numpy.int32), 2))
    args = (sizes, documents, 32, 2, int(sizes.sum()), False, 1)
    assert dispatch.sample_index_route(documents) == (
        dispatch.VECTORIZED if limit else dispatch.KERNEL
    )
    numpy.testing.assert_array_equal(
        index.build_sample_index(*args), reference.build_sample_index(*args)
    )


def test_routes_depend_on_the_inputs_only():
    """The same inputs take the same route however much was built before."""
    weights = numpy.full(1024, 1 / 1024)
    first = [dispatch.blending_route(1024, n) for n in (10, 10**4, 10**6)]
    for _ in range(3):
        index.build_blending_indices(weights, 10_000)  # spend time in the numpy route
    assert [dispatch.blending_route(1024, n) for n in (10, 10**4, 10**6)] == first
    assert first == [dispatch.NUMPY, dispatch.NUMPY, dispatch.FAST]
    assert dispatch.shuffle_route(numpy.random.RandomState(0), numpy.arange(10)) == dispatch.NUMPY
    assert (
        dispatch.shuffle_route(numpy.random.RandomState(0), numpy.arange(10**4)) == dispatch.NUMPY
    )
    assert (
        dispatch.shuffle_route(numpy.random.RandomState(0), numpy.arange(10**5)) == dispatch.KERNEL
    )
    assert dispatch.sample_index_route(numpy.arange(65_536)) == dispatch.VECTORIZED
    assert dispatch.sample_index_route(numpy.arange(65_537)) == dispatch.KERNEL
