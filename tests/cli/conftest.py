"""Fixtures of the command-line tests."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_font_cache() -> None:
    """Build matplotlib's font cache once, before any test runs.

    On a machine that never ran matplotlib, its first use runs ``fc-list`` in a child
    process to list the fonts, so the first quick test that draws a plot would be blamed
    for starting a process (tests/conftest.py). Building the cache here, outside every
    test, keeps that one-off out of the tests' own accounting.
    """
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.font_manager  # noqa: F401  (builds the cache on import)
