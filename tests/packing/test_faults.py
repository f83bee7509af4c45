"""Packing collectives under faults: a rank that never calls, a rank that exits.

Real gloo groups of 4 ranks (one launch, ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S=3``), one
fresh sub-group per scenario so that a broken group does not spoil the next one:

1. ``wrap_data_iterator`` over DP=4, rank 3 never calls it;
2. the same, rank 0 (the group's first rank) never calls it;
3. ``HybridCPDataLoaderWrapper`` over DP=4, rank 3 never asks for the batch;
4. ``get_batch_on_this_rank_for_sequence_packing`` over TP=2 (ranks 0, 1), rank 1 never
   calls it (ranks 2, 3 run it normally on their own TP group);
5. ranks 0, 1 run ``wrap_data_iterator`` over DP=2 and ranks 2, 3 the HybridCP wrapper
   over DP=2; after one good batch rank 1 and rank 2 exit (``os._exit``).

Every other rank must raise ``DistributedError`` within about the timeout, naming the
step, the group and the rank that did not answer (or exited).  Without the bound the
others wait for gloo's own timeout (30 minutes by default, 60 s in the harness) and
then fail with a raw gloo error naming no rank.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.support import distributed_harness as harness
from tests.support.waiting import gone, wait_until

WORLD = 4
TIMEOUT_S = 3
# A hang bound, not a speed check: far above TIMEOUT_S (a loaded machine is slow), and
# below gloo's own 60 s timeout in the harness, so only tokenloom's bound can meet it.
BOUND_S = 40
pytestmark = [pytest.mark.distributed]


# --------------------------------------------------------------------------- worker side
def _wrap_items(dp_rank: int) -> list:
    from tests.packing import _cases as cases

    return cases.random_sequences("dp4_cp1", "dp_balanced", dp_rank, 1)


WRAP_CONFIG = {
    "max_seqlen_per_dp_cp_rank": 64,
    "sequence_packing_scheduler": "dp_balanced",
    "virtual_pipeline_model_parallel_size": None,
}


def _packed_steps(dp_rank: int, steps: int = 2) -> list:
    """Two packed samples per step, three sub-samples each (one of them empty)."""
    import torch

    out = []
    for step in range(steps):
        batch = []
        for k in range(2):
            n = 3 + (dp_rank + step + k) % 4
            tokens = torch.arange(2 * n) + 1000 * (dp_rank + 1) + 100 * step + 10 * k
            batch.append(
                {
                    "tokens": tokens,
                    "labels": tokens + 1,
                    "loss_mask": torch.ones(2 * n),
                    "position_ids": torch.arange(2 * n),
                    "cu_seqlens": torch.tensor([0, n, n, 2 * n], dtype=torch.int32),
                }
            )
        out.append(batch)
    return out


def _pg(dp: Any = None, tp: Any = None) -> Any:
    import torch.distributed as dist

    from tokenloom.packing import ProcessGroupCollection, SingleRankGroup

    one = SingleRankGroup(dist.get_rank())
    return ProcessGroupCollection(tp=tp or one, cp=one, dp=dp or one, dp_cp=dp or one, pp=one)


def _wrap(group: Any, dp_rank: int) -> Any:
    from tokenloom.packing import wrap_data_iterator

    items = _wrap_items(dp_rank)
    out = wrap_data_iterator(iter(items), SimpleNamespace(**WRAP_CONFIG), len(items), _pg(group))
    return out[1]


def _get_batch(tp_group: Any, tp_rank: int) -> Any:
    import torch

    from tokenloom.packing import get_batch_on_this_rank_for_sequence_packing

    packed = {
        "tokens": torch.arange(8),
        "labels": torch.arange(8) + 1,
        "loss_mask": torch.ones(8),
        "position_ids": torch.arange(8),
        "cu_seqlens": torch.tensor([0, 3, 8], dtype=torch.int32),
        "cu_seqlens_padded": torch.tensor([0, 4, 8], dtype=torch.int32),
        "max_seqlen": torch.tensor(4, dtype=torch.int32),
    }
    out = get_batch_on_this_rank_for_sequence_packing(
        iter([packed]) if tp_rank == 0 else None, pg_collection=_pg(tp=tp_group)
    )
    return out[0].tolist()


def _timed(fn: Callable[[], Any]) -> dict:
    started = time.monotonic()
    result = harness.outcome(fn)
    result["seconds"] = time.monotonic() - started
    return result


def _silent_phases(rank: int, groups: dict) -> dict:
    import torch.distributed as dist

    from tokenloom.packing import HybridCPDataLoaderWrapper

    result: dict[str, Any] = {}
    if rank != 3:
        result["wrap_member_silent"] = _timed(lambda: _wrap(groups["dp4a"], rank))
    dist.barrier()
    if rank != 0:
        result["wrap_first_rank_silent"] = _timed(lambda: _wrap(groups["dp4b"], rank))
    dist.barrier()
    if rank != 3:
        config = SimpleNamespace(max_seqlen_per_dp_cp_rank=16)
        wrapper = HybridCPDataLoaderWrapper(iter(_packed_steps(rank)), config, _pg(groups["dp4c"]))
        result["hybrid_member_silent"] = _timed(lambda: list(next(wrapper)[0]))
    dist.barrier()
    tp_group = groups["tp01"] if rank < 2 else groups["tp23"]
    if rank != 1:
        result["get_batch_tp_silent"] = _timed(lambda: _get_batch(tp_group, rank % 2))
    dist.barrier()
    return result


def _exit_phase(rank: int, groups: dict, out_dir: str, result: dict) -> None:
    from tokenloom.packing import HybridCPDataLoaderWrapper

    if rank < 2:
        first = harness.outcome(lambda: _wrap(groups["dp01"], rank))
        run_second = lambda: _wrap(groups["dp01"], rank)  # noqa: E731
    else:
        config = SimpleNamespace(max_seqlen_per_dp_cp_rank=16)
        wrapper = HybridCPDataLoaderWrapper(
            iter(_packed_steps(rank - 2)), config, _pg(groups["dp23"])
        )
        first = harness.outcome(lambda: sorted(next(wrapper)[0]))
        run_second = lambda: sorted(next(wrapper)[0])  # noqa: E731
    result["exit_first_batch"] = first
    if rank in (1, 2):  # dies between two batches
        harness.write_result(out_dir, rank, result)
        os._exit(0)
    peer = 1 if rank == 0 else 2
    pid = int((Path(out_dir) / f"rank{peer}.pid").read_text())
    wait_until(lambda: gone(pid), 60, f"rank {peer} exited")  # the exit comes first
    result["exit_second_batch"] = _timed(run_second)


def worker(out_dir: str) -> None:
    os.environ["TOKENLOOM_DISTRIBUTED_TIMEOUT_S"] = str(TIMEOUT_S)
    rank, _ = harness.init_worker()
    import torch.distributed as dist

    groups = {
        name: dist.new_group(ranks)
        for name, ranks in (
            ("dp4a", [0, 1, 2, 3]),
            ("dp4b", [0, 1, 2, 3]),
            ("dp4c", [0, 1, 2, 3]),
            ("tp01", [0, 1]),
            ("tp23", [2, 3]),
            ("dp01", [0, 1]),
            ("dp23", [2, 3]),
        )
    }
    (Path(out_dir) / f"rank{rank}.pid").write_text(str(os.getpid()))
    dist.barrier()  # every rank's pid is written
    result = _silent_phases(rank, groups)
    _exit_phase(rank, groups, out_dir, result)
    harness.write_result(out_dir, rank, result)
    os._exit(0)  # the groups are broken: no destroy_process_group


# --------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("packing_faults")
    return harness.launch(__file__, "faults", out, WORLD, timeout=150)


def _failed(outcome: dict, *needles: str) -> None:
    assert not outcome["ok"] and outcome["type"] == "DistributedError", outcome
    for needle in needles:
        assert needle in outcome["message"], (needle, outcome["message"])
    assert outcome["seconds"] < BOUND_S, outcome


@pytest.mark.timeout(240)
def test_a_rank_that_never_calls_wrap_data_iterator_is_named(results: list[dict]) -> None:
    for rank in (0, 1, 2):
        _failed(
            results[rank]["wrap_member_silent"],
            f"rank {rank}: wrap_data_iterator: all_gather of the sub-sample counts over the DP",
            "group of ranks [0, 1, 2, 3]",
            f"rank 3 did not answer within {TIMEOUT_S} s",
        )
    assert "rank 0, the group's first rank, reports" in results[1]["wrap_member_silent"]["message"]


@pytest.mark.timeout(240)
def test_a_first_rank_that_never_calls_wrap_data_iterator_is_named(results: list[dict]) -> None:
    for rank in (1, 2, 3):
        _failed(
            results[rank]["wrap_first_rank_silent"],
            "wrap_data_iterator",
            "group of ranks [0, 1, 2, 3]",
            f"rank 0, the group's first rank (it checks that every rank arrived), did not "
            f"answer within {TIMEOUT_S} s",
        )


@pytest.mark.timeout(240)
def test_a_rank_that_never_asks_the_hybrid_cp_wrapper_is_named(results: list[dict]) -> None:
    for rank in (0, 1, 2):
        _failed(
            results[rank]["hybrid_member_silent"],
            "HybridCPDataLoaderWrapper, batch 1: all_gather of the sub-sample counts",
            "group of ranks [0, 1, 2, 3]",
            "rank 3 did not answer",
        )


@pytest.mark.timeout(240)
def test_a_silent_tp_rank_is_named_by_get_batch(results: list[dict]) -> None:
    _failed(
        results[0]["get_batch_tp_silent"],
        "get_batch_on_this_rank_for_sequence_packing: broadcast of the shapes over the TP group",
        "group of ranks [0, 1]",
        "rank 1 did not answer",
    )
    for rank in (2, 3):  # their own TP group is whole
        outcome = results[rank]["get_batch_tp_silent"]
        assert outcome["ok"] and outcome["value"] == [[0, 1, 2, 0, 4, 5, 6, 7]], outcome


@pytest.mark.timeout(240)
def test_a_rank_that_exits_between_batches_is_named(results: list[dict]) -> None:
    for rank in range(WORLD):
        assert results[rank]["exit_first_batch"]["ok"], results[rank]["exit_first_batch"]
    _failed(
        results[0]["exit_second_batch"],
        "wrap_data_iterator: all_gather of the sub-sample counts",
        "group of ranks [0, 1]",
        "rank 1 closed its connection (exited or crashed)",
    )
    _failed(
        results[3]["exit_second_batch"],
        "HybridCPDataLoaderWrapper, batch 2",
        "group of ranks [2, 3]",
        "rank 2, the group's first rank (it checks that every rank arrived), closed its "
        "connection (exited or crashed)",
    )


if __name__ == "__main__":
    worker(sys.argv[2])
