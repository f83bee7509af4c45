"""Without numba (TOKENLOOM_DISABLE_NUMBA=1) the public functions use the references."""

from __future__ import annotations

import sys

import numpy

import tokenloom.index as index
from tokenloom.index import _jit


def test_disabled_numba_uses_reference(monkeypatch, golden_dir):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    assert _jit.kernels("_blend_fast") is None and _jit.kernels("_kernels") is None
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

    monkeypatch.setattr(_jit, "_LOADED", {})
    for name in ("_kernels", "_blend_fast", "_blend_queue"):
        monkeypatch.delitem(sys.modules, f"tokenloom.index.{name}", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_numba)
    assert _jit.kernels("_kernels") is None and _jit.kernels("_blend_fast") is None
    dataset_index, _ = index.build_blending_indices([0.25, 0.75], 8)
    numpy.testing.assert_array_equal(dataset_index, [1, 0, 1, 1, 0, 1, 1, 1])  # tie at t=4: id 0
