"""`tokenloom trace` against a real gloo group: every rank is its own process with its
own loader (one DataLoader worker), the ranks' batches are gathered over gloo, and every
global batch, and each rank's part of it, equals the trace of its step (skipped steps
left out, as the loaders leave them out), past the end of the first pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli._trace_support import load_traced, write_config
from tests.support import distributed_harness as harness
from tests.training._data import write_corpus

SCRIPT = str(Path(__file__).with_name("_trace_dist_worker.py"))


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["single", "cyclic", "elastic"])
def test_each_rank_of_a_gloo_group_serves_what_the_trace_says(tmp_path: Path, kind: str):
    big = write_corpus(tmp_path / "big", 200, seed=1)
    small = write_corpus(tmp_path / "small", 60, seed=2)
    config = write_config(
        tmp_path,
        "train.json",
        ["0.7", big, "0.3", small],
        dataloader_type=kind,
        skip_batches=[[2, 4]],
        world_size=2,
    )
    dataset, _, _, _ = load_traced(config)  # the cache, built once before the ranks start
    results = harness.launch(
        SCRIPT, kind, tmp_path / "ranks", 2, timeout=240, env_extra={"TRACE_CONFIG": config}
    )
    steps = len(dataset) // 8
    for rank, result in enumerate(results):
        assert result is not None and result["samples"] == len(dataset)
        assert 2 not in result["steps"] and 3 not in result["steps"]
        assert len(result["steps"]) == steps + (0 if kind == "single" else 3) - 2
        assert result["wrong"] == [] and result["own_wrong"] == [], (rank, result)
