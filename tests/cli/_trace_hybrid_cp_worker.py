"""One gloo rank of tests/cli/test_trace_hybrid_cp.py (run as a script): feed this rank's
real hybrid-CP loader over a real blend to the real HybridCPDataLoaderWrapper and
compare, at every step, what the wrapper serves with `tokenloom trace --step N
--hybrid-cp`'s records; then perturb the traced assignment and count the steps where
the comparison catches it.

Scenarios: ``hybrid`` (a fresh run, every step); ``resumed`` (the run's loaders, built
with micro_batch_size 1 where the config says 2, stop after RESUME_AT steps; DP rank 0's
state_dict() is saved; loaders that load it feed the wrapper, compared with the trace
of ``--state``, and with the config-only trace, which must differ)."""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy

RESUME_AT = 3


def _traced_groups(records, micro_batches: int, total: int) -> list[list[list[int]]]:
    groups: list[list[list[int]]] = [[[] for _ in range(total)] for _ in range(micro_batches)]
    for record in records:
        for piece in record["hybrid_cp"]:
            for rank in piece["dp_cp_ranks"]:
                groups[piece["microbatch"]][rank].append(piece["subsample_id"])
    return [[sorted(ids) for ids in per_rank] for per_rank in groups]


def mismatches(dataset, records, micro_batches, total, rank, samples, groups) -> list[str]:
    """What differs between the traced assignment and what the wrapper served: the
    schedule, and each sub-sample's tokens and (0-d) dataset_id on this rank."""
    out = []
    served_groups = [[sorted(int(g) for g in ids) for ids in per_rank] for per_rank in groups]
    if _traced_groups(records, micro_batches, total) != served_groups:
        out.append("sample_id_groups")
    want = {}
    for record in records:
        tokens = numpy.asarray(dataset[record["sample"]]["tokens"]).tolist()
        for piece in record["hybrid_cp"]:
            if rank in piece["dp_cp_ranks"]:
                cut = tokens[piece["token_start"] : piece["token_end"]]
                want[piece["subsample_id"]] = (cut, record["dataset_id"], 0)
    got = {
        int(gid): (
            numpy.asarray(piece["tokens"]).tolist(),
            int(piece["dataset_id"]),
            piece["dataset_id"].ndim,
        )
        for gid, piece in samples.items()
    }
    if got != want:
        out.append("tokens and dataset_id served on this rank")
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


def _resumed(config, dataset, layout, pg, out_dir):
    """The run's loaders (micro_batch_size 1) stopped after RESUME_AT steps, DP rank 0's
    state saved, a resumed loader; ``(loader, traced dataset, layout, resume)``."""
    import torch
    import torch.distributed as dist
    from tests.cli._trace_support import load_traced, rank_loader

    run = replace(layout, micro_batch_size=1)
    loader = rank_loader(dataset, run, int(pg.dp.rank()), 1, hybrid_context_parallel=True)
    batches = iter(loader)
    for _ in range(RESUME_AT):
        next(batches)
    state, path = loader.state_dict(), Path(out_dir) / "state.pt"
    if dist.get_rank() == 0:
        torch.save(state, path)
    dist.barrier()
    traced, state_layout, resume, _ = load_traced(config, str(path))
    resumed = rank_loader(dataset, state_layout, int(pg.dp.rank()), 1, hybrid_context_parallel=True)
    resumed.load_state_dict(state)
    return resumed, traced, state_layout, resume


def main(scenario: str, out_dir: str) -> None:
    from tests.cli._trace_support import load_traced, rank_loader
    from tests.support import distributed_harness as harness

    from tokenloom.cli._trace_hybrid_cp import add_hybrid_cp
    from tokenloom.cli._trace_step import step_records
    from tokenloom.packing import build_pg_collection
    from tokenloom.packing.hybrid_cp import HybridCPDataLoaderWrapper

    rank, world = harness.init_worker()
    config_path = os.environ["TRACE_CONFIG"]
    dataset, layout, _, _ = load_traced(config_path)
    total = layout.data_parallel_size * layout.context_parallel_size
    pg = build_pg_collection(world, 1, layout.context_parallel_size, 1, backend="gloo")
    traced, traced_layout, resume, first = dataset, layout, None, 0
    if scenario == "resumed":
        loader, traced, traced_layout, resume = _resumed(config_path, dataset, layout, pg, out_dir)
        first = RESUME_AT
    else:
        loader = rank_loader(dataset, layout, int(pg.dp.rank()), 1, hybrid_context_parallel=True)
    config = SimpleNamespace(max_seqlen_per_dp_cp_rank=layout.max_seqlen_per_dp_cp_rank)
    wrapper = HybridCPDataLoaderWrapper(iter(loader), config, pg)  # samples as served
    me = int(pg.dp_cp.rank())
    steps = len(dataset) // layout.global_batch_size
    wrong, plain_wrong, caught, shapes = [], [], 0, set()
    for step in range(first, steps):
        samples, groups = next(wrapper)
        records = step_records(traced, traced_layout, step, resume)
        micro = add_hybrid_cp(traced, traced_layout, records)
        shapes.update(len(p["dp_cp_ranks"]) for r in records for p in r["hybrid_cp"])
        if mismatches(traced, records, micro, total, me, samples, groups):
            wrong.append(step)
        bad = _perturbed(records, total)
        caught += bool(mismatches(traced, bad, max(micro, 2), total, me, samples, groups))
        plain = step_records(dataset, layout, step)
        plain_micro = add_hybrid_cp(dataset, layout, plain)
        if mismatches(dataset, plain, plain_micro, total, me, samples, groups):
            plain_wrong.append(step)
    result = {"first": first, "steps": steps, "wrong": wrong, "caught": caught}
    result.update(group_sizes=sorted(shapes), plain_wrong=plain_wrong, total=total)
    harness.write_result(out_dir, rank, result)
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])
