"""The kernel loader: one switch, named modules, read-only views, cache locations."""

from __future__ import annotations

import numpy
import pytest

from tokenloom.kernels import KERNELS, KernelLoader, cache_locations, numba_disabled, read_only


def test_the_one_switch(monkeypatch):
    for value, disabled in (("", False), ("0", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", value)
        assert numba_disabled() is disabled
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    loader = KernelLoader()
    assert loader.get("batch") is None and not loader.available()
    with pytest.raises(RuntimeError, match="TOKENLOOM_DISABLE_NUMBA is set"):
        loader.require("batch")


def test_unknown_module_is_refused():
    with pytest.raises(ValueError, match="unknown kernel module"):
        KERNELS.get("nope")


def test_a_module_is_loaded_once(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.delenv("TOKENLOOM_DISABLE_NUMBA", raising=False)
    loader = KernelLoader()
    assert loader.get("blend_scan") is loader.get("blend_scan") is not None


def test_read_only_views():
    array = numpy.arange(4)
    view = read_only(array)
    assert not view.flags.writeable and numpy.shares_memory(view, array)
    assert read_only(view) is view and array.flags.writeable


def test_cache_locations_follow_numba(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert cache_locations() == [str(tmp_path)]
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    places = cache_locations()
    assert places[0].endswith("kernels/__pycache__") and places[1] == str(
        tmp_path / "xdg" / "numba"
    )
