"""Without numba (TOKENLOOM_DISABLE_NUMBA=1) the public functions use the references."""

from __future__ import annotations

import sys

import numpy
import pytest

import tokenloom.index as index
from tokenloom.kernels import KERNEL_MODULES, KERNELS


def test_disabled_numba_uses_reference(monkeypatch, golden_dir):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    assert all(KERNELS.get(name) is None for name in KERNEL_MODULES)
    with numpy.load(golden_dir / "kernels.npz") as kernels:
        dataset_index, _ = index.build_blending_indices(
            kernels["blend2.weights"], int(kernels["blend2.size"])
        )
        numpy.testing.assert_array_equal(dataset_index, kernels["blend2.dataset_index"])
        dataset_index, _ = index.build_exhaustive_blending_indices(kernels["exhaustive1.sizes"])
        numpy.testing.assert_array_equal(dataset_index, kernels["exhaustive1.dataset_index"])
        seq, epochs, tokens, drop_last, extra = (int(a) for a in kernels["sample_idx1.args"])
        sample_index = index.build_sample_index(
            kernels["sample_idx1.sizes"],
            kernels["sample_idx1.document_index"],
            seq,
            epochs,
            tokens,
            bool(drop_last),
            extra,
        )
        numpy.testing.assert_array_equal(sample_index, kernels["sample_idx1.sample_index"])


def test_missing_numba_is_tolerated(monkeypatch):
    """A ModuleNotFoundError for numba itself means "no fast kernels", nothing else."""
    import builtins

    real_import = builtins.__import__

    def no_numba(name, *args, **kwargs):
        if name == "numba" or name.startswith("numba."):
            raise ModuleNotFoundError("No module named 'numba'", name="numba")
        return real_import(name, *args, **kwargs)

    monkeypatch.delenv("TOKENLOOM_DISABLE_NUMBA", raising=False)
    for name in KERNEL_MODULES + ("blend_queue", "prefetch"):
        monkeypatch.delitem(sys.modules, f"tokenloom.kernels.{name}", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_numba)
    KERNELS.clear()
    try:
        with pytest.warns(RuntimeWarning, match="numba kernels unavailable") as caught:
            assert KERNELS.get("sample_index") is None and KERNELS.get("blend_fast") is None
            dataset_index, _ = index.build_blending_indices([0.25, 0.75], 8)
        assert len(caught) == 1  # one warning, however many kernels were asked for
        numpy.testing.assert_array_equal(dataset_index, [1, 0, 1, 1, 0, 1, 1, 1])  # tie: id 0
        assert not KERNELS.available()
    finally:
        KERNELS.clear()
