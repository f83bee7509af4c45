"""`tokenloom trace --step N --hybrid-cp` against the real HybridCPDataLoaderWrapper: two
gloo ranks (DP 2 x CP 1), each its own process with its own hybrid-CP loader over
packed samples (inter_document_masking), feed the wrapper; at every step the wrapper's
sample_id_groups and the sub-samples it serves on each rank equal the trace's
assignment, and a perturbed assignment is caught at every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli._trace_support import load_traced, write_config
from tests.support import distributed_harness as harness
from tests.training._data import write_corpus

from tokenloom.cli.main import main

SCRIPT = str(Path(__file__).with_name("_trace_hybrid_cp_worker.py"))


def _config(tmp_path: Path, **extra) -> str:
    corpus = write_corpus(tmp_path / "c", 200, seed=3)
    settings = {
        "hybrid_context_parallel": True,
        "inter_document_masking": True,
        "max_seqlen_per_dp_cp_rank": 16,
        **extra,
    }
    return write_config(tmp_path, "train.json", ["1", corpus], **settings)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_wrapper_serves_every_sub_sample_where_the_trace_says(tmp_path: Path):
    config = _config(tmp_path)
    dataset, layout, _, _ = load_traced(config)  # the cache, built before the ranks start
    results = harness.launch(
        SCRIPT, "hybrid", tmp_path / "ranks", 2, timeout=240, env_extra={"TRACE_CONFIG": config}
    )
    steps = len(dataset) // layout.global_batch_size
    assert steps >= 10
    for result in results:
        assert result is not None and result["steps"] == steps
        assert result["wrong"] == []
        assert result["caught"] == steps  # the comparison fails on a perturbed assignment
        assert result["group_sizes"] == [1, 2]  # one-rank and two-rank sub-samples both seen


def test_the_json_lists_each_sub_sample_once_on_the_ranks_of_its_group(tmp_path: Path, capsys):
    config = _config(tmp_path)
    assert main(["trace", "--config", config, "--step", "1", "--json", "--hybrid-cp"]) == 0
    body = json.loads(capsys.readouterr().out)
    pieces = [p for s in body["samples"] for p in s["hybrid_cp"]]
    assert sorted(p["subsample_id"] for p in pieces) == list(range(len(pieces)))
    assert body["hybrid_cp_microbatches"] == 1 + max(p["microbatch"] for p in pieces)
    for sample in body["samples"]:
        ends = [(p["token_start"], p["token_end"]) for p in sample["hybrid_cp"]]
        assert ends[0][0] == 0 and all(a < b for a, b in ends)
    for piece in pieces:
        width = 1 if piece["token_end"] - piece["token_start"] <= 16 else 2
        assert len(piece["dp_cp_ranks"]) == width and set(piece["dp_cp_ranks"]) <= {0, 1}


def test_hybrid_cp_needs_the_hybrid_loader_and_packed_samples(tmp_path: Path, capsys):
    unpacked = _config(tmp_path, inter_document_masking=False)
    assert main(["trace", "--config", unpacked, "--step", "0", "--hybrid-cp"]) != 0
    assert "set inter_document_masking: true" in capsys.readouterr().err
    plain = _config(tmp_path, hybrid_context_parallel=False)
    assert main(["trace", "--config", plain, "--step", "0", "--hybrid-cp"]) != 0
    assert "set hybrid_context_parallel: true" in capsys.readouterr().err
