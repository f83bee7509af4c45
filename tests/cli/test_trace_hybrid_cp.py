"""`tokenloom trace --step N --hybrid-cp` against the real HybridCPDataLoaderWrapper: gloo
ranks (DP 2 x CP 1 and DP 2 x CP 2), each its own process with its own hybrid-CP loader
over packed samples (inter_document_masking) of a real two-corpus blend (whose samples
carry a 0-d dataset_id), feed the wrapper; at every step the wrapper's sample_id_groups
and the sub-samples it serves on each rank (tokens and dataset_id) equal the trace's
assignment, and a perturbed assignment is caught at every step. A resumed run (its
loaders' saved state, --state) is traced as the resumed loaders serve it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.cli._trace_support import load_traced, rank_loader, write_config
from tests.support import distributed_harness as harness
from tests.training._data import write_corpus

from tokenloom.cli.main import main
from tokenloom.packing import build_pg_collection
from tokenloom.packing.hybrid_cp import HybridCPDataLoaderWrapper

SCRIPT = str(Path(__file__).with_name("_trace_hybrid_cp_worker.py"))


def _config(tmp_path: Path, name: str = "train.json", **extra) -> str:
    code = write_corpus(tmp_path / "code", 120, seed=3)
    text = write_corpus(tmp_path / "text", 120, seed=4)
    settings = {
        "hybrid_context_parallel": True,
        "inter_document_masking": True,
        "max_seqlen_per_dp_cp_rank": 16,
        **extra,
    }
    return write_config(tmp_path, name, ["1", code, "2", text], **settings)


def _launch(tmp_path: Path, config: str, scenario: str, world: int) -> list:
    load_traced(config)  # the cache, built before the ranks start
    env = {"TRACE_CONFIG": config}
    return harness.launch(SCRIPT, scenario, tmp_path / scenario, world, timeout=240, env_extra=env)


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("world", "cp", "limit", "widths"),
    [(2, 1, 16, [1, 2]), (4, 2, 8, [1, 2, 4])],
    ids=["dp2xcp1", "dp2xcp2"],
)
def test_the_wrapper_serves_every_sub_sample_where_the_trace_says(
    tmp_path: Path, world, cp, limit, widths
):
    config = _config(
        tmp_path, world_size=world, context_parallel_size=cp, max_seqlen_per_dp_cp_rank=limit
    )
    dataset, layout, _, _ = load_traced(config)
    assert type(dataset).__name__ == "BlendedDataset" and dataset[0]["dataset_id"].ndim == 0
    assert (layout.data_parallel_size, layout.context_parallel_size) == (2, cp)
    steps = len(dataset) // layout.global_batch_size
    assert steps >= 10
    for result in _launch(tmp_path, config, "hybrid", world):
        assert result is not None and result["steps"] == steps and result["total"] == 2 * cp
        assert result["wrong"] == []
        assert result["caught"] == steps  # the comparison fails on a perturbed assignment
        assert result["group_sizes"] == widths  # sub-samples on 1, 2 (and 4) ranks all seen


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_resumed_run_is_traced_as_its_resumed_loaders_serve_it(tmp_path: Path):
    # the run's loaders used micro_batch_size 1; the config says 2: --state's wins
    config = _config(tmp_path, world_size=4, context_parallel_size=2, max_seqlen_per_dp_cp_rank=8)
    dataset, layout, _, _ = load_traced(config)
    steps = len(dataset) // layout.global_batch_size
    for result in _launch(tmp_path, config, "resumed", 4):
        assert result is not None and (result["first"], result["steps"]) == (3, steps)
        assert result["wrong"] == [] and result["caught"] == steps - 3
        assert result["plain_wrong"] == list(range(3, steps))  # the config alone is wrong
    state = str(tmp_path / "resumed" / "state.pt")
    argv = ["trace", "--config", config, "--state", state, "--json", "--hybrid-cp"]
    assert main([*argv, "--step", "2"]) != 0  # before the resume point


def _traced(config: str, capsys, *flags: str) -> dict:
    assert main(["trace", "--config", config, "--json", "--hybrid-cp", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_wrapper_serves_a_blend_s_0_d_dataset_id_on_every_sub_sample(tmp_path: Path, capsys):
    config = _config(tmp_path, world_size=1, max_seqlen_per_dp_cp_rank=32)
    dataset, layout, _, _ = load_traced(config)
    loader = rank_loader(dataset, layout, 0, 0, hybrid_context_parallel=True)
    limit = SimpleNamespace(max_seqlen_per_dp_cp_rank=32)
    wrapper = HybridCPDataLoaderWrapper(iter(loader), limit, build_pg_collection(1))
    samples, _ = next(wrapper)  # megatron-core's wrapper: IndexError on the 0-d key
    pieces = [
        (r, p) for r in _traced(config, capsys, "--step", "0")["samples"] for p in r["hybrid_cp"]
    ]
    assert sorted(samples) == [p["subsample_id"] for _, p in pieces]
    for record, piece in pieces:
        served = samples[piece["subsample_id"]]
        assert served["dataset_id"].shape == () and served["dataset_id"].dtype == torch.int16
        assert int(served["dataset_id"]) == record["dataset_id"]
        tokens = dataset[record["sample"]]["tokens"][piece["token_start"] : piece["token_end"]]
        assert served["tokens"].tolist() == list(tokens)
    assert {record["dataset_id"] for record, _ in pieces} == {0, 1}


def test_the_json_lists_each_sub_sample_once_on_the_ranks_of_its_group(tmp_path: Path, capsys):
    body = _traced(_config(tmp_path), capsys, "--step", "1")
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


@pytest.mark.parametrize("limit", [0, -4, True, "16", 16.0])
def test_a_bad_limit_is_the_scheduler_s_error_naming_the_config_key(tmp_path: Path, capsys, limit):
    config = _config(tmp_path, max_seqlen_per_dp_cp_rank=limit)
    assert main(["trace", "--config", config, "--step", "0", "--hybrid-cp"]) != 0
    err = capsys.readouterr().err
    assert "config.max_seqlen_per_dp_cp_rank" in err and f"got {limit!r}" in err
    assert main(["trace", "--config", config, "--step", "0"]) == 0  # only --hybrid-cp reads it
