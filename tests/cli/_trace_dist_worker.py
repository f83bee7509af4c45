"""One gloo rank of tests/cli/test_trace_distributed.py (run as a script): serve the run
with this rank's real loader, gather every rank's batches over gloo, and compare each
global batch, and this rank's own part, with `tokenloom trace`'s records of its step."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy
import torch.distributed as dist


def _tokens(dataset, record) -> list[int]:
    from tokenloom.cli._trace_ranges import parts

    low_level = parts(dataset)[record["dataset_id"]].dataset
    pieces = [numpy.asarray(low_level.get(d, s, e - s)) for d, s, e in record["document_ranges"]]
    return numpy.concatenate(pieces).tolist()


def main(kind: str, out_dir: str) -> None:
    from tests.cli._trace_support import SEQ, load_traced, rank_loader
    from tests.support import distributed_harness as harness

    from tokenloom.cli._trace_step import step_records

    rank, world = harness.init_worker()
    dataset, layout, _, quarantine = load_traced(os.environ["TRACE_CONFIG"])
    assert layout.data_parallel_size == world and layout.dataloader_type == kind
    skips = [list(pair) for pair in quarantine.skip_batches]
    loader = rank_loader(
        dataset, layout, rank, 1, data_sharding=layout.data_sharding, skip_batches=skips
    )
    steps = len(dataset) // layout.global_batch_size + (0 if kind == "single" else 3)
    traced = [s for s in range(steps) if not quarantine.skipped([s])[0]]  # cyclic: past a pass
    iterator = iter(loader)
    mine = [
        [numpy.asarray(next(iterator)["tokens"]).tolist() for _ in range(layout.micro_steps)]
        for _ in traced
    ]
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)  # the global batches, from every rank's process
    wrong, own_wrong = [], []
    for k, step in enumerate(traced):
        records = step_records(dataset, layout, step, None, quarantine)
        want = [_tokens(dataset, record)[:SEQ] for record in records]
        served = [
            row
            for micro in range(layout.micro_steps)
            for r in range(world)
            for row in everyone[r][k][micro]
        ]
        ours = [row for micro in mine[k] for row in micro]
        if served != want:
            wrong.append(step)
        if ours != [w for w, record in zip(want, records) if record["rank"] == rank]:
            own_wrong.append(step)
    dist.barrier()
    harness.write_result(
        out_dir,
        rank,
        {"steps": traced, "wrong": wrong, "own_wrong": own_wrong, "samples": len(dataset)},
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])
