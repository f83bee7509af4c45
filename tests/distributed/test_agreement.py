"""Ranks that disagree fail together, naming the field; a silent rank is named within the
timeout.  Real gloo groups of 3 ranks (``python test_distributed_reliability.py ...``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from tests.support import distributed_harness as harness
from tests.support.waiting import wait_until

WORLD = 3
# A hang bound, not a speed check: far above the 3 s timeouts (a loaded machine is slow),
# and below gloo's own 60 s timeout in the harness, so only tokenloom's bound can meet it.
BOUND_S = 40
pytestmark = [pytest.mark.distributed]


# --------------------------------------------------------------------------- worker side
def _corpora(out: Path):
    from tests.support.dataset_files import write_corpus

    prefixes = [str(out / name) for name in ("a", "b")]
    if not all(os.path.exists(f"{p}.idx") for p in prefixes):
        raise RuntimeError("the test writes the corpora before it launches the ranks")
    return prefixes, write_corpus


def _build(out: Path, cache: Path, *, blend=None, seed=5, comm=None):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig

    prefixes, _ = _corpora(out)
    blend = blend or (prefixes, [0.3, 0.7])
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=16,
        blend=blend,
        split="1,0,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, [40, 0, 0], lambda: True, config, comm=comm
    ).build()
    return [int(t) for t in datasets[0][7]["tokens"][:8]]


def worker(out_dir: str) -> None:
    rank, _ = harness.init_worker()
    out = Path(out_dir)
    prefixes, _ = _corpora(out)
    result = {
        "blend": harness.outcome(
            lambda: _build(out, out / "c1", blend=(prefixes[:1], None) if rank == 1 else None)
        ),
        "seed": harness.outcome(lambda: _build(out, out / "c2", seed=6 if rank == 2 else 5)),
        "node_local": harness.outcome(lambda: _build(out, out / f"local{rank}")),
    }
    import torch.distributed as dist

    from tokenloom.distributed import get_communicator

    sub = dist.new_group([0, 1, 2])
    if rank != 0:  # rank 0, which checks that every rank arrived, never comes
        first = get_communicator(timeout_s=3, group=sub)
        started = time.monotonic()
        result["silent_first"] = harness.outcome(lambda: first.all_gather(rank))
        result["silent_first_seconds"] = time.monotonic() - started
    dist.barrier()
    comm = get_communicator(timeout_s=3)
    if rank == 2:  # never joins the next build: crashed, or stuck somewhere else
        harness.write_result(out_dir, rank, result)
        done = [out / f"rank{other}.json" for other in (0, 1)]  # the others gave up on it
        wait_until(lambda: all(path.exists() for path in done), 120, "ranks 0, 1 finished")
        os._exit(0)
    started = time.monotonic()
    result["silent"] = harness.outcome(lambda: _build(out, out / "c3", comm=comm))
    result["silent_seconds"] = time.monotonic() - started
    harness.write_result(out_dir, rank, result)
    os._exit(0)  # the group is broken: no destroy_process_group


# --------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from tests.support.dataset_files import write_corpus

    out = tmp_path_factory.mktemp("disagree")
    write_corpus(out / "a", [30, 45, 20, 60, 33] * 4, seed=1)
    write_corpus(out / "b", [25, 50, 35] * 5, seed=2)
    return harness.launch(__file__, "helper", out, WORLD, timeout=150)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("scenario, field", [("blend", "blend"), ("seed", "random_seed")])
def test_ranks_that_disagree_all_raise_naming_the_field(results, scenario, field):
    for rank, result in enumerate(results):
        outcome = result[scenario]
        assert not outcome["ok"] and outcome["type"] == "DistributedError", (rank, outcome)
        assert f"would build different the datasets: {field} is" in outcome["message"]


@pytest.mark.timeout(200)
def test_node_local_cache_folders_may_differ(results):
    samples = [result["node_local"] for result in results]
    assert all(outcome["ok"] for outcome in samples), samples
    assert samples[0]["value"] == samples[1]["value"] == samples[2]["value"]


@pytest.mark.timeout(200)
def test_a_silent_rank_is_named_within_the_timeout(results):
    for rank in (0, 1):
        outcome = results[rank]["silent"]
        assert not outcome["ok"] and outcome["type"] == "DistributedError", outcome
        assert results[rank]["silent_seconds"] < BOUND_S
    assert "rank 2 did not answer within 3 s" in results[0]["silent"]["message"]
    assert (
        "rank 0, the group's first rank, reports: rank 2 did not answer within 3 s"
        in results[1]["silent"]["message"]
    )
    assert "the dataset build's all_gather_object" in results[1]["silent"]["message"]


@pytest.mark.timeout(200)
def test_a_silent_first_rank_is_named_by_the_others_within_the_timeout(results):
    for rank in (1, 2):
        outcome = results[rank]["silent_first"]
        assert not outcome["ok"] and outcome["type"] == "DistributedError", outcome
        assert results[rank]["silent_first_seconds"] < BOUND_S
        assert (
            "rank 0, the group's first rank (it checks that every rank arrived), did not "
            "answer within 3 s" in outcome["message"]
        ), outcome


if __name__ == "__main__":
    worker(sys.argv[2])
