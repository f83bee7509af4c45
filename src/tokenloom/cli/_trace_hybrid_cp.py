"""``tokenloom trace --step N --hybrid-cp``: where ``HybridCPDataLoaderWrapper`` serves
each sub-sample of a global batch after rerouting it over the DP x CP ranks.

The wrapper's schedule depends only on the step's sub-sample lengths, so it is rebuilt
offline: each traced sample's ``cu_seqlens`` (the dataset's own field, with
``inter_document_masking``) cut into non-empty sub-samples, numbered as the wrapper
numbers them (DP rank 0's first, then by sample and sub-sample), and scheduled by the
wrapper's own :class:`~tokenloom.packing.balanced_cp.BalancedCPScheduler`.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError


def _cuts(dataset: Any, sample: int) -> list[tuple[int, int]]:
    """The non-empty ``(start, end)`` sub-samples of global sample ``sample``."""
    item = dataset[int(sample)]
    if "cu_seqlens" not in item:
        raise ConfigError(
            "--hybrid-cp: the samples have no cu_seqlens; HybridCPDataLoaderWrapper needs "
            "packed samples: set inter_document_masking: true in the config"
        )
    bounds = [int(v) for v in numpy.asarray(item["cu_seqlens"]).reshape(-1).tolist()]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _limit(dataset: Any, layout: Any) -> Any:
    """The config's ``max_seqlen_per_dp_cp_rank`` as given (the scheduler checks it, as
    the wrapper's does), or the sequence length."""
    if layout.max_seqlen_per_dp_cp_rank is not None:
        return layout.max_seqlen_per_dp_cp_rank
    return int(read_attribute(dataset.config, "sequence_length"))


def add_hybrid_cp(dataset: Any, layout: Any, records: list[dict[str, Any]]) -> int:
    """Give every record of one global batch ``hybrid_cp``: its sub-samples as
    ``{subsample_id, token_start, token_end, microbatch, dp_cp_ranks}``; return the
    number of micro-batches the wrapper's schedule has."""
    from tokenloom.packing.balanced_cp import BalancedCPScheduler

    if not layout.hybrid_context_parallel:
        raise ConfigError(
            "--hybrid-cp: the run's loader is not the hybrid-CP one; HybridCPDataLoaderWrapper "
            "reads one list of samples per rank: set hybrid_context_parallel: true"
        )
    order = sorted(range(len(records)), key=lambda i: (records[i]["rank"], records[i]["position"]))
    pieces = [(i, a, b) for i in order for a, b in _cuts(dataset, records[i]["sample"])]
    total = layout.data_parallel_size * layout.context_parallel_size
    scheduler = BalancedCPScheduler(_limit(dataset, layout), total)
    _, groups = scheduler.get_groups_and_subsamples(
        [(gid, b - a) for gid, (_, a, b) in enumerate(pieces)]
    )
    where: dict[int, tuple[int, list[int]]] = {}
    for micro, per_rank in enumerate(groups):
        for rank, ids in enumerate(per_rank):
            for gid in ids:
                where.setdefault(int(gid), (micro, []))[1].append(rank)
    for record in records:
        record["hybrid_cp"] = []
    for gid, (i, a, b) in enumerate(pieces):
        micro, ranks = where[gid]
        records[i]["hybrid_cp"].append(
            {
                "subsample_id": gid,
                "token_start": a,
                "token_end": b,
                "microbatch": micro,
                "dp_cp_ranks": ranks,
            }
        )
    return len(groups)


__all__ = ["add_hybrid_cp"]
