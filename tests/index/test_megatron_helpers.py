"""Differential tests against megatron-core's compiled ``helpers_cpp`` on random inputs.

Runs when ``TOKENLOOM_MEGATRON_PATH`` names a folder holding megatron-core 0.16.1
(``scripts/test.sh`` installs it there with ``pip --target``); skipped otherwise.  Only
the self-contained pybind11 extension ``megatron/core/datasets/helpers_cpp*.so`` is
loaded (by file path), never the megatron package itself.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.index.index_strategies import blend_weights

import tokenloom.index as index

pytestmark = pytest.mark.megatron
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def helpers_cpp():
    root = os.environ.get("TOKENLOOM_MEGATRON_PATH")
    if not root:
        pytest.skip("TOKENLOOM_MEGATRON_PATH is not set (megatron-core's helpers_cpp)")
    found = sorted(Path(root, "megatron", "core", "datasets").glob("helpers_cpp*.so"))
    if not found:
        pytest.skip(f"no megatron/core/datasets/helpers_cpp*.so under {root}")
    spec = importlib.util.spec_from_file_location("helpers_cpp", found[0])
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:  # e.g. built for another Python
        pytest.skip(f"cannot load {found[0]}: {exc}")
    return module


@SETTINGS
@given(weights=blend_weights(max_datasets=300), size=st.integers(0, 20_000))
def test_blending_matches_helpers_cpp(helpers_cpp, weights, size):
    expected = numpy.zeros(size, numpy.int16), numpy.zeros(size, numpy.int64)
    helpers_cpp.build_blending_indices(*expected, weights, weights.size, size, False)
    actual = index.build_blending_indices(weights, size)
    numpy.testing.assert_array_equal(actual[0], expected[0])
    numpy.testing.assert_array_equal(actual[1], expected[1])


@SETTINGS
@given(sizes=st.lists(st.integers(1, 200), min_size=1, max_size=150))
def test_exhaustive_matches_helpers_cpp(helpers_cpp, sizes):
    sizes = numpy.array(sizes, dtype=numpy.int64)
    total = int(sizes.sum())
    expected = numpy.zeros(total, numpy.int16), numpy.zeros(total, numpy.int64)
    helpers_cpp.build_exhaustive_blending_indices(*expected, sizes, sizes.size)
    actual = index.build_exhaustive_blending_indices(sizes)
    numpy.testing.assert_array_equal(actual[0], expected[0])
    numpy.testing.assert_array_equal(actual[1], expected[1])


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    num_docs=st.integers(1, 200),
    epochs=st.integers(1, 3),
    seq=st.integers(2, 300),
    drop_last=st.booleans(),
    extra=st.sampled_from([0, 1]),
)
def test_sample_index_matches_helpers_cpp(
    helpers_cpp, seed, num_docs, epochs, seq, drop_last, extra
):
    rng = numpy.random.default_rng(seed)
    sizes = rng.integers(1, 400, num_docs).astype(numpy.int32)
    documents = numpy.tile(numpy.arange(num_docs, dtype=numpy.int32), epochs)
    rng.shuffle(documents)
    tokens = int(sizes.sum())
    expected = helpers_cpp.build_sample_idx_int32(
        sizes, documents, seq, epochs, tokens, drop_last, extra
    )
    actual = index.build_sample_index(sizes, documents, seq, epochs, tokens, drop_last, extra)
    assert actual.dtype == expected.dtype
    numpy.testing.assert_array_equal(actual, expected)
