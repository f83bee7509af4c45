"""Shared strategies and helpers for the index kernel tests."""

from __future__ import annotations

import pytest

from tokenloom.kernels import KERNELS


@pytest.fixture(scope="session")
def compiled():
    """The numba blending kernel modules (skips when numba is missing or disabled)."""
    fast, kernels = KERNELS.get("blend_fast"), KERNELS.get("blend_scan")
    if fast is None or kernels is None:
        pytest.skip("numba is not installed (or TOKENLOOM_DISABLE_NUMBA is set)")
    return fast, kernels
