"""Every kernel case recorded from megatron-core 0.16.1 (kernels.npz), fast and reference."""

from __future__ import annotations

import numpy
import pytest

import tokenloom.index as fast
import tokenloom.index.reference as reference

IMPLEMENTATIONS = [pytest.param(fast, id="fast"), pytest.param(reference, id="reference")]


@pytest.fixture(scope="module")
def kernels(golden_dir):
    with numpy.load(golden_dir / "kernels.npz") as arrays:
        return {name: arrays[name] for name in arrays.files}


def _cases(kernels, prefix):
    names = sorted({k.split(".")[0] for k in kernels if k.startswith(prefix)})
    assert names, f"no {prefix} case in kernels.npz"
    return names


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_blending_matches_megatron(kernels, impl):
    for case in _cases(kernels, "blend"):
        dataset_index, sample_index = impl.build_blending_indices(
            kernels[f"{case}.weights"], int(kernels[f"{case}.size"])
        )
        assert dataset_index.dtype == numpy.int16 and sample_index.dtype == numpy.int64
        numpy.testing.assert_array_equal(dataset_index, kernels[f"{case}.dataset_index"], case)
        numpy.testing.assert_array_equal(
            sample_index, kernels[f"{case}.dataset_sample_index"], case
        )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_exhaustive_blending_matches_megatron(kernels, impl):
    for case in _cases(kernels, "exhaustive"):
        dataset_index, sample_index = impl.build_exhaustive_blending_indices(
            kernels[f"{case}.sizes"]
        )
        assert dataset_index.dtype == numpy.int16 and sample_index.dtype == numpy.int64
        numpy.testing.assert_array_equal(dataset_index, kernels[f"{case}.dataset_index"], case)
        numpy.testing.assert_array_equal(
            sample_index, kernels[f"{case}.dataset_sample_index"], case
        )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_sample_index_matches_megatron(kernels, impl):
    for case in _cases(kernels, "sample_idx"):
        seq, epochs, tokens, drop_last, extra = (int(a) for a in kernels[f"{case}.args"])
        result = impl.build_sample_index(
            kernels[f"{case}.sizes"],
            kernels[f"{case}.document_index"],
            seq,
            epochs,
            tokens,
            bool(drop_last),
            extra,
        )
        expected = kernels[f"{case}.sample_index"]
        assert result.dtype == expected.dtype, case
        numpy.testing.assert_array_equal(result, expected, case)
