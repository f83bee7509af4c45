"""One gloo rank of tests/cli/test_trace_hybrid_cp.py (run as a script): feed this rank's
real hybrid-CP loader to the real HybridCPDataLoaderWrapper and compare, at every step,
what the wrapper serves with `tokenloom trace --step N --hybrid-cp`'s records; then
perturb the traced assignment and count the steps where the comparison catches it."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy


def _traced_groups(records, micro_batches: int, total: int) -> list[list[list[int]]]:
    groups: list[list[list[int]]] = [[[] for _ in range(total)] for _ in range(micro_batches)]
    for record in records:
        for piece in record["hybrid_cp"]:
            for rank in piece["dp_cp_ranks"]:
                groups[piece["microbatch"]][rank].append(piece["subsample_id"])
    return [[sorted(ids) for ids in per_rank] for per_rank in groups]


def mismatches(dataset, records, micro_batches, total, rank, samples, groups) -> list[str]:
    """What differs between the traced assignment and what the wrapper served."""
    out = []
    served_groups = [[sorted(int(g) for g in ids) for ids in per_rank] for per_rank in groups]
    if _traced_groups(records, micro_batches, total) != served_groups:
        out.append("sample_id_groups")
    want = {}
    for record in records:
        tokens = numpy.asarray(dataset[record["sample"]]["tokens"]).tolist()
        for piece in record["hybrid_cp"]:
            if rank in piece["dp_cp_ranks"]:
                want[piece["subsample_id"]] = tokens[piece["token_start"] : piece["token_end"]]
    got = {int(gid): numpy.asarray(piece["tokens"]).tolist() for gid, piece in samples.items()}
    if got != want:
        out.append("tokens served on this rank")
    return out


def _perturbed(records, total: int):
    """The records with one sub-sample moved: to the next micro-batch, or (when there is
    one micro-batch) a one-rank sub-sample to the other ranks."""
    wrong = copy.deepcopy(records)
    pieces = [p for r in wrong for p in r["hybrid_cp"]]
    alone = [p for p in pieces if len(p["dp_cp_ranks"]) < total]
    if alone:
        alone[0]["dp_cp_ranks"] = [(r + 1) % total for r in alone[0]["dp_cp_ranks"]]
    else:
        pieces[0]["microbatch"] = (pieces[0]["microbatch"] + 1) % 2
    return wrong


def main(out_dir: str) -> None:
    from tests.cli._trace_support import load_traced, rank_loader
    from tests.support import distributed_harness as harness

    from tokenloom.cli._trace_hybrid_cp import add_hybrid_cp
    from tokenloom.cli._trace_step import step_records
    from tokenloom.packing import build_pg_collection
    from tokenloom.packing.hybrid_cp import HybridCPDataLoaderWrapper

    rank, world = harness.init_worker()
    dataset, layout, _, _ = load_traced(os.environ["TRACE_CONFIG"])
    total = layout.data_parallel_size * layout.context_parallel_size
    pg = build_pg_collection(world, 1, layout.context_parallel_size, 1, backend="gloo")
    dp_rank = int(pg.dp.rank())
    loader = rank_loader(dataset, layout, dp_rank, 1, hybrid_context_parallel=True)
    config = SimpleNamespace(max_seqlen_per_dp_cp_rank=layout.max_seqlen_per_dp_cp_rank)
    # the blend's scalar dataset_id cannot be cut into sub-samples (the wrapper slices
    # every key), so the training loop hands the wrapper the samples without it
    batches = ([{k: v for k, v in s.items() if k != "dataset_id"} for s in b] for b in loader)
    wrapper = HybridCPDataLoaderWrapper(batches, config, pg)
    me = int(pg.dp_cp.rank())
    steps = len(dataset) // layout.global_batch_size
    wrong, caught, shapes = [], 0, set()
    for step in range(steps):
        samples, groups = next(wrapper)
        records = step_records(dataset, layout, step)
        micro = add_hybrid_cp(dataset, layout, records)
        shapes.update(len(p["dp_cp_ranks"]) for r in records for p in r["hybrid_cp"])
        if mismatches(dataset, records, micro, total, me, samples, groups):
            wrong.append(step)
        bad = _perturbed(records, total)
        caught += bool(mismatches(dataset, bad, max(micro, 2), total, me, samples, groups))
    harness.write_result(
        out_dir,
        rank,
        {"steps": steps, "wrong": wrong, "caught": caught, "group_sizes": sorted(shapes)},
    )
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[2])
