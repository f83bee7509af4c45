"""One gloo rank of tests/training/test_distributed_loader.py (run as a script)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist
from tests.support import distributed_harness as harness
from tests.training._data import IndexDataset, seen
from tests.training._golden import GOLDEN

from tokenloom.training import build_pretraining_data_loader

KINDS = {"MegatronPretrainingRandomSampler": "cyclic", "MegatronPretrainingSampler": "single"}


def pick_cases(world: int) -> list[dict]:
    cases = json.loads((GOLDEN / "samplers.json").read_text())["cases"]
    chosen: dict = {}
    for case in cases:
        ok = all("error" not in record for record in case["per_rank"])
        key = (case["sampler"], case["args"].get("data_sharding"), case["tag"])
        if (
            ok
            and case["data_parallel_size"] == world
            and case["sampler"] in KINDS
            and key not in chosen
        ):
            chosen[key] = case
    return list(chosen.values())[:8]


def expected(case: dict, rank: int) -> list[list]:
    record = case["per_rank"][rank]
    if "passes" in record:
        return [batch for one in record["passes"] for batch in one["batches"]]
    return record["batches"]


def build(case: dict, rank: int, world: int, workers: int) -> Any:
    args = case["args"]
    extra = (
        {"data_sharding": args["data_sharding"]}
        if "data_sharding" in args
        else {"drop_last": args["drop_last"]}
    )
    return build_pretraining_data_loader(
        IndexDataset(args["total_samples"]),
        args["consumed_samples"],
        dataloader_type=KINDS[case["sampler"]],
        micro_batch_size=args["micro_batch_size"],
        data_parallel_rank=rank,
        data_parallel_size=world,
        num_workers=workers,
        multiprocessing_context="fork" if workers else None,
        **extra,
    )


def run_case(case: dict, rank: int, world: int, workers: int) -> bool:
    want = expected(case, rank)
    stop = len(want) // 2
    first = build(case, rank, world, workers)
    iterator = iter(first)
    got = [seen(next(iterator)) for _ in range(stop)]
    states: list[Any] = [None] * world
    dist.all_gather_object(states, pickle.dumps(first.state_dict()))  # a real collective
    del iterator, first
    second = build(case, rank, world, workers)
    second.load_state_dict(pickle.loads(states[rank]))
    iterator = iter(second)
    got += [seen(next(iterator)) for _ in range(len(want) - stop)]
    return got == want


def main(scenario: str, out_dir: str) -> None:
    rank, world = harness.init_worker()
    results = {}
    for number, case in enumerate(pick_cases(world)):
        workers = 1 if number % 3 == 0 else 0
        results[case["id"]] = run_case(case, rank, world, workers)
    dist.barrier()
    harness.write_result(out_dir, rank, {"scenario": scenario, "results": results})
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])
