"""Shared strategies and helpers for the index kernel tests."""

from __future__ import annotations

import pytest

from tokenloom.index import _jit


@pytest.fixture(scope="session")
def compiled():
    """The numba kernel modules (skips when numba is missing or disabled)."""
    fast, kernels = _jit.kernels("_blend_fast"), _jit.kernels("_kernels")
    if fast is None or kernels is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    return fast, kernels
