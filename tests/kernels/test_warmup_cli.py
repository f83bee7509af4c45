"""``tokenloom warmup``: a --help that teaches, one-line errors."""

from __future__ import annotations

import pytest

from tokenloom.cli.main import main


def test_help_explains_where_the_cache_goes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["warmup", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for needed in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "container", "--token-dtypes"):
        assert needed in text


def test_unknown_group_is_a_one_line_error(capsys):
    assert main(["warmup", "--kernels", "index,bogus"]) == 1
    err = capsys.readouterr().err
    assert "unknown kernel group or token dtype 'bogus'" in err and "Traceback" not in err


def test_disabled_numba_is_a_one_line_error(capsys, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    assert main(["warmup"]) == 1
    assert "TOKENLOOM_DISABLE_NUMBA" in capsys.readouterr().err


def test_warm_up_one_group_reports_it(capsys):
    pytest.importorskip("numba")
    assert main(["warmup", "--kernels", "shuffle"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("shuffle") and "cached in" in out


def test_warm_up_compiles_the_randperm_kernels(capsys):
    pytest.importorskip("numba")
    assert main(["warmup", "--kernels", "permutation"]) == 0
    assert capsys.readouterr().out.startswith("permutation")
    from tokenloom.kernels import KERNELS

    kernels = KERNELS.require("permutation")
    assert kernels.swap_block.signatures and kernels.inside_out_block.signatures


def test_warm_up_compiles_the_range_kernels_the_trace_calls(capsys, tmp_path):
    """After ``warmup --kernels ranges``, the manifest of a real (cached, mmapped) run
    compiles no new specialisation of the range kernels."""
    pytest.importorskip("numba")
    from tests.cli._trace_support import load_traced, write_config
    from tests.training._data import write_corpus

    from tokenloom.cli._trace_manifest import make_manifest
    from tokenloom.cli._trace_order import run_order
    from tokenloom.kernels import KERNELS

    assert main(["warmup", "--kernels", "ranges"]) == 0
    assert capsys.readouterr().out.startswith("ranges")
    kernels = KERNELS.require("ranges")
    warmed = (set(kernels.count_parts.signatures), set(kernels.fill_parts.signatures))
    assert all(warmed)
    big = write_corpus(tmp_path / "big", 400, seed=1)
    small = write_corpus(tmp_path / "small", 100, seed=2)
    config = write_config(tmp_path, "c.json", ["0.7", big, "0.3", small], train_iters=700)
    for _ in range(2):  # built, then mapped from the cache
        dataset, layout, _, _ = load_traced(config)
        order = run_order(dataset, layout, len(dataset) // layout.global_batch_size)
        assert order.size >= 4096  # the kernels' size
        make_manifest(dataset, order, layout.describe(), 0)
    assert set(kernels.count_parts.signatures) == warmed[0]
    assert set(kernels.fill_parts.signatures) == warmed[1]
