"""``HybridCPDataLoaderWrapper``: schedule packed sub-samples over DP x CP with BalancedCP.

Each ``next()``:

1. pulls this DP rank's batch (a list of packed samples with ``cu_seqlens``);
2. all-gathers the sub-sample lengths over the DP group (zero-length sub-samples
   get no id; ids count DP rank 0 first, then by sample and sub-sample);
3. schedules them with :class:`BalancedCPScheduler` (identical on every rank);
4. reroutes each sub-sample to the DP x CP ranks that run it with all-to-all.

It returns ``(samples, sample_id_groups)``: ``samples`` maps each global id this rank
takes part in to ``{key: tensor}`` (a slice of the source sample, whole on every rank
that shares it; the ``cu_seqlens``, ``max_seqlen`` and ``batch_idx`` keys are dropped),
exactly as megatron-core 0.16.1's class of the same name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import torch

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing._comm import Route, gather_lengths, reroute, resolve_device
from tokenloom.packing.balanced_cp import BalancedCPScheduler, Groups
from tokenloom.packing.groups import group_size, require_groups

DROPPED_KEYS = ("cu_seqlens", "batch_idx", "max_seqlen")


def split_packed(batch: list[dict[str, torch.Tensor]]) -> list[tuple[int, dict[str, torch.Tensor]]]:
    """Cut packed samples into ``(length, sub-sample)`` pairs, empty ones skipped."""
    out = []
    for index, sample in enumerate(batch):
        if not isinstance(sample, dict) or "cu_seqlens" not in sample:
            raise PackingError(
                f"batch item {index} has no 'cu_seqlens' (keys: "
                f"{sorted(sample) if isinstance(sample, dict) else type(sample).__name__}); "
                "HybridCPDataLoaderWrapper needs packed samples with cu_seqlens"
            )
        bounds = [int(v) for v in sample["cu_seqlens"].reshape(-1).tolist()]
        if any(b > a for a, b in zip(bounds[1:], bounds)) or (bounds and bounds[0] < 0):
            raise PackingError(
                f"batch item {index}: cu_seqlens {bounds} must start at >= 0 and never decrease"
            )
        for start, end in zip(bounds, bounds[1:]):
            if end == start:
                continue
            out.append(
                (
                    end - start,
                    {
                        key: value[start:end]
                        for key, value in sample.items()
                        if key not in DROPPED_KEYS
                    },
                )
            )
    return out


class HybridCPDataLoaderWrapper:
    """Wrap a data iterator of packed batches; yield ``(samples, sample_id_groups)``."""

    def __init__(
        self,
        data_iterator: Optional[Iterator[Any]],
        config: Any,
        pg_collection: Any = None,
        *,
        device: Any = None,
    ) -> None:
        groups = require_groups(pg_collection, ("dp_cp", "dp", "tp"))
        self.data_iterator = data_iterator
        self.config = config
        self.dp_cp_group, self.dp_group, self.tp_group = groups["dp_cp"], groups["dp"], groups["tp"]
        limit = read_attribute(config, "max_seqlen_per_dp_cp_rank", None)
        if limit is None:
            raise ConfigError(
                "config.max_seqlen_per_dp_cp_rank is required by "
                "HybridCPDataLoaderWrapper (tokens one rank can hold)"
            )
        self.cp_balancing_scheduler = BalancedCPScheduler(limit, self.dp_cp_group)
        self.total_hdp_gpus = group_size(self.dp_cp_group)
        self.device = resolve_device(device, self.dp_cp_group)
        self.batches = 0
        """Batches handed out so far (errors of a collective name the batch)."""

    def __iter__(self) -> HybridCPDataLoaderWrapper:
        return self

    def __next__(self) -> tuple[Optional[dict[int, dict[str, torch.Tensor]]], Optional[Groups]]:
        if self.data_iterator is None:
            return None, None
        batch = next(self.data_iterator)
        if not isinstance(batch, (list, tuple)) or not batch:
            raise PackingError(
                f"each item of the data iterator must be a non-empty list of "
                f"packed samples, got {type(batch).__name__}"
            )
        pieces = split_packed(list(batch))
        self.batches += 1
        step = f"HybridCPDataLoaderWrapper, batch {self.batches}"
        lengths, offsets = gather_lengths([n for n, _ in pieces], self.dp_group, self.device, step)
        global_id_seqlens = [(gid, n) for gid, n in enumerate(lengths)]
        _, sample_id_groups = self.cp_balancing_scheduler.get_groups_and_subsamples(
            global_id_seqlens, self.config
        )
        route = Route(sample_id_groups, offsets, self.dp_group, self.dp_cp_group)
        first = offsets[route.my_dp]
        local = {first + i: piece for i, (_, piece) in enumerate(pieces)}
        dtypes = {k: v.dtype for k, v in batch[0].items() if k not in DROPPED_KEYS}
        samples = reroute(local, lengths, route, self.dp_cp_group, self.device, dtypes, step)
        return samples, sample_id_groups
