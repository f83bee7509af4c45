"""``HybridCPDataLoaderWrapper``: schedule packed sub-samples over DP x CP with BalancedCP.

Each ``next()``:

1. pulls this DP rank's batch (a list of packed samples with ``cu_seqlens``);
2. all-gathers the sub-sample lengths over the DP group (zero-length sub-samples
   get no id; ids count DP rank 0 first, then by sample and sub-sample);
3. schedules them with :class:`BalancedCPScheduler` (identical on every rank);
4. reroutes each sub-sample to the DP x CP ranks that run it with all-to-all.

Each step is megatron-core's method of the same name (``get_global_seqlens``,
``get_global_id_seqlens``, ``unpack_batch``, ``reroute_samples_to_hdp_ranks``), called
by ``__next__`` as megatron-core's calls them, so a subclass may override any of them.
It returns ``(samples, sample_id_groups)``: ``samples`` maps each global id this rank
takes part in to ``{key: tensor}`` (a slice of the source sample, whole on every rank
that shares it; the ``cu_seqlens``, ``max_seqlen`` and ``batch_idx`` keys are dropped),
exactly as megatron-core 0.16.1's class of the same name.

One deliberate difference: a 0-d key (a ``BlendedDataset`` sample's ``dataset_id``)
is not a token tensor, so it is not sliced (megatron-core's ``sample[key][start:end]``
raises ``IndexError`` on it): every sub-sample carries its packed sample's value,
rerouted as one element and served 0-d, as the source gives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import torch

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing._comm import Route, gather_lengths, reroute, resolve_device
from tokenloom.packing.balanced_cp import BalancedCPScheduler, Groups
from tokenloom.packing.groups import group_rank, group_size, require_groups

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
                        key: value if _is_scalar(value) else value[start:end]
                        for key, value in sample.items()
                        if key not in DROPPED_KEYS
                    },
                )
            )
    return out


def _is_scalar(value: Any) -> bool:
    """A 0-d value (a blend's ``dataset_id``): every sub-sample carries it whole."""
    return isinstance(value, torch.Tensor) and value.dim() == 0


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
        self.dtypes: dict[str, torch.dtype] = {}
        """The keys rerouted and their dtypes (of the current batch's first sample)."""
        self.scalar_keys: list[str] = []
        """The 0-d keys among them (one element per sub-sample, served 0-d)."""

    def __iter__(self) -> HybridCPDataLoaderWrapper:
        return self

    def __next__(self) -> tuple[Optional[dict[int, dict[str, torch.Tensor]]], Optional[Groups]]:
        """megatron-core's steps, each a method a subclass may override: gather the
        sub-sample lengths, number them, schedule, unpack, reroute."""
        if self.data_iterator is None:
            return None, None
        batch = next(self.data_iterator)
        if not isinstance(batch, (list, tuple)) or not batch:
            raise PackingError(
                f"each item of the data iterator must be a non-empty list of "
                f"packed samples, got {type(batch).__name__}"
            )
        self.batches += 1
        self.dtypes = {k: v.dtype for k, v in batch[0].items() if k not in DROPPED_KEYS}
        self.scalar_keys = [k for k in self.dtypes if _is_scalar(batch[0][k])]
        lengths = [n for n, _ in split_packed(list(batch))]
        subsample_seqlens = torch.tensor(lengths, dtype=torch.int32)
        seqlens_gathered, offsets = self.get_global_seqlens(subsample_seqlens)
        global_id_seqlens, global_ids_this_rank = self.get_global_id_seqlens(
            len(lengths), offsets, seqlens_gathered
        )
        _, sample_id_groups = self.cp_balancing_scheduler.get_groups_and_subsamples(
            global_id_seqlens, self.config
        )
        samples = self.reroute_samples_to_hdp_ranks(
            self.unpack_batch(list(batch)),
            global_ids_this_rank,
            global_id_seqlens,
            sample_id_groups,
            offsets,
        )
        return samples, sample_id_groups

    def _step(self) -> str:
        return f"HybridCPDataLoaderWrapper, batch {self.batches}"

    def get_global_seqlens(self, subsample_seqlens: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """Every DP rank's non-empty sub-sample lengths, DP rank 0 first, and the offset
        (int32 tensor) where each DP rank's sub-samples start."""
        lengths, bounds = gather_lengths(
            [int(n) for n in subsample_seqlens.reshape(-1).tolist()],
            self.dp_group,
            self.device,
            self._step(),
        )
        return lengths, torch.tensor(bounds[:-1], dtype=torch.int32)

    def get_global_id_seqlens(
        self, num_local_subsamples: int, offsets: Any, seqlens_gathered: list[int]
    ) -> tuple[list[tuple[int, int]], torch.Tensor]:
        """``([(global id, length)], global ids of this rank's own sub-samples)``."""
        first = int(
            list(offsets)[group_rank(self.dp_group) if group_size(self.dp_group) > 1 else 0]
        )
        global_id_seqlens = [(gid, int(n)) for gid, n in enumerate(seqlens_gathered)]
        mine = torch.arange(first, first + int(num_local_subsamples), dtype=torch.int32)
        return global_id_seqlens, mine

    def unpack_batch(self, batch: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
        """The non-empty sub-samples of the packed samples, in order (``cu_seqlens``,
        ``max_seqlen`` and ``batch_idx`` dropped)."""
        return [piece for _, piece in split_packed(list(batch))]

    def reroute_samples_to_hdp_ranks(
        self,
        batch: list[dict[str, torch.Tensor]],
        global_ids_this_rank: Any,
        global_id_seqlens: list[tuple[int, int]],
        sample_id_groups: Groups,
        offsets: Any,
    ) -> dict[int, dict[str, torch.Tensor]]:
        """Send each sub-sample to the DP x CP ranks the schedule puts it on; return
        ``{global id: sub-sample}`` of this rank's."""
        bounds = [int(o) for o in list(offsets)] + [len(global_id_seqlens)]
        route = Route(sample_id_groups, bounds, self.dp_group, self.dp_cp_group)
        local = {int(g): piece for g, piece in zip(list(global_ids_this_rank), batch)}
        lengths = [n for _, n in global_id_seqlens]
        dtypes = self.dtypes or {k: v.dtype for k, v in batch[0].items()}
        scalars = (
            self.scalar_keys if self.dtypes else [k for k in dtypes if _is_scalar(batch[0][k])]
        )
        wire = {k: _wide(dtype) if k in scalars else dtype for k, dtype in dtypes.items()}
        served = reroute(
            local, lengths, route, self.dp_cp_group, self.device, wire, self._step(), scalars
        )
        for piece in served.values():  # one element each on the wire, 0-d as the source's
            piece.update({k: piece[k].reshape(()).to(dtypes[k]) for k in scalars if k in piece})
        return served


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The wire dtype of a 0-d key (gloo's all-to-all has no int16, a blend's
    ``dataset_id``): float64 or int64, which hold every value of the narrower ones."""
    return torch.float64 if dtype.is_floating_point else torch.int64
