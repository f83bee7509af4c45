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
    monkeypatch.setattr(dispatch, "BLEND_NUMPY_MAX_WORK_BEFORE_NUMBA", work)
    monkeypatch.setattr(dispatch, "BLEND_SCAN_BELOW", below)
    assert dispatch.blending_route(len(weights), size) == route
    assert dispatch.blending_route(len(weights), size, numba_started=False) == route
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


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_a_blend_before_numba_started_takes_the_numpy_scan_up_to_its_limit():
    """In a fresh process (no kernel has run) a blend of 3,000 sources x 30,000 samples
    (the 3,000-prefix cold start) is scanned in numpy and starts no numba; once a kernel
    has run, the same blend takes the kernel. Both give the reference's indices."""
    code = """
import json, numpy
from tokenloom.index import build_blending_indices, build_sample_index, dispatch
from tokenloom.index import reference
from tokenloom.kernels import KERNELS
weights = numpy.random.default_rng(3).random(3000); weights /= weights.sum()
routes = [dispatch.blending_route(3000, 30000, numba_started=KERNELS.started())]
first = build_blending_indices(weights, 30000)
routes.append(KERNELS.started())
sizes = numpy.full(70000, 3, dtype=numpy.int32)
build_sample_index(sizes, numpy.arange(70000, dtype=numpy.int32), 8, 1, 210000, False, 1)
routes += [KERNELS.started(), dispatch.blending_route(3000, 30000, KERNELS.started())]
second = build_blending_indices(weights, 30000)
expected = reference.build_blending_indices(weights, 30000)
same = [bool((a == b).all()) for got in (first, second) for a, b in zip(got, expected)]
print(json.dumps([routes, same]))
"""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("TOKENLOOM_DISABLE_NUMBA", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    routes, same = json.loads(done.stdout.strip().splitlines()[-1])
    assert routes == [dispatch.NUMPY, False, True, dispatch.FAST]
    assert same == [True] * 4


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
    assert dispatch.sample_index_route(numpy.arange(256)) == dispatch.SMALL
    assert dispatch.sample_index_route(numpy.arange(257)) == dispatch.VECTORIZED
    assert dispatch.sample_index_route(numpy.arange(65_536)) == dispatch.VECTORIZED
    assert dispatch.sample_index_route(numpy.arange(65_537)) == dispatch.KERNEL
