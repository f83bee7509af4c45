"""``BasePackingScheduler`` (the whole ``run()`` pipeline) and Megatron's ``DpBalancedScheduler``.

A packing scheduler's ``get_groups_and_subsamples(sample_id_seqlens)`` returns
``[microbatch][dcp_rank] -> list of positions in the input list``, with
``dcp_rank = cp_rank + cp_size * dp_rank``; all CP ranks of one DP rank get the same
list (the CP ranks split each sequence later, in THD format).  ``run()`` fetches the
global batch, schedules it, reroutes the sub-samples, packs them and broadcasts
over PP and TP (Megatron-LM's ``data_schedule.py`` at commit d98e8a64).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, Optional

import torch

import tokenloom.packing._pipeline as steps
from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing._comm import Route, broadcast_scalars, reroute
from tokenloom.packing.groups import group_rank, group_size

Schedule = list[list[list[int]]]
RunResult = tuple[Any, int, float, float]


def _positive(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(
            f"{name} must be a positive int{' or None' if allow_none else ''}, got {value!r}"
        )


def read_vpp(config: Any) -> Optional[int]:
    """``config.virtual_pipeline_model_parallel_size``: None or an int >= 1 (1: no VPP)."""
    vpp = read_attribute(config, "virtual_pipeline_model_parallel_size", None)
    _positive("config.virtual_pipeline_model_parallel_size", vpp, allow_none=True)
    return None if vpp is None else int(vpp)


def check_lengths(sample_id_seqlens: Sequence[tuple[Any, int]], cap: int, what: str) -> None:
    """PackingError for a malformed entry or a sequence longer than ``cap``."""
    for position, entry in enumerate(sample_id_seqlens):
        if len(entry) != 2:
            raise PackingError(f"sample_id_seqlens[{position}] must be (sample_id, seqlen)")
        sample_id, seqlen = entry
        if isinstance(seqlen, bool) or not isinstance(seqlen, numbers.Integral) or seqlen < 0:
            raise PackingError(
                f"sample {sample_id!r} has length {seqlen!r}; lengths must be ints >= 0"
            )
        if seqlen > cap:
            raise PackingError(
                f"sample {sample_id!r} (position {position}) has {seqlen} tokens, more than "
                f"{what} = {cap} fit on its ranks; raise max_seqlen_per_dp_cp_rank or "
                "context_parallel_size, or split the sequence"
            )


class BasePackingScheduler:
    """Base of the packing schedulers: the constructor, required keys and ``run()``.

    ``max_seqlen_per_dp_cp_rank``, ``cp_size`` and ``dp_size`` are ints >= 1 (numpy
    ints too); ``microbatch_group_size_per_vp_stage`` is None (no VPP) or an int >= 1.
    A huge ``max_seqlen_per_dp_cp_rank`` means no limit; 0, negative, NaN, floats and
    bools are refused with a ConfigError naming the field.
    """

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank: int,
        cp_size: int,
        dp_size: int,
        microbatch_group_size_per_vp_stage: Optional[int],
    ) -> None:
        _positive("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank)
        _positive("cp_size", cp_size)
        _positive("dp_size", dp_size)
        _positive(
            "microbatch_group_size_per_vp_stage",
            microbatch_group_size_per_vp_stage,
            allow_none=True,
        )
        self.max_seqlen_per_dp_cp_rank = int(max_seqlen_per_dp_cp_rank)
        self.cp_size = int(cp_size)
        self.dp_size = int(dp_size)
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_seq_len_all_ranks = self.max_seqlen_per_dp_cp_rank * self.cp_size

    @property
    def group_multiple(self) -> int:
        """The microbatch-group count must be a multiple of this (DP x VPP group size)."""
        return self.dp_size * (self.microbatch_group_size_per_vp_stage or 1)

    def get_required_sample_keys(self) -> list[str]:
        """Keys every sub-sample must carry."""
        return list(steps.TOKEN_KEYS + steps.LENGTH_KEYS)

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> Schedule:
        """Schedule the sequences: ``[microbatch][dcp_rank] -> positions``."""
        raise NotImplementedError

    def spread(self, packed_groups: list[list[int]]) -> Schedule:
        """Lay groups out as ``[microbatch][dcp_rank]``: DP rank d of microbatch i gets
        group ``i * dp_size + d``, shared by its CP ranks."""
        count = len(packed_groups) // self.dp_size
        return [
            [
                packed_groups[i * self.dp_size + j // self.cp_size]
                for j in range(self.cp_size * self.dp_size)
            ]
            for i in range(count)
        ]

    def run(
        self,
        data_iterator: Any,
        num_microbatches: int,
        dp_group: Any,
        tp_group: Any,
        pp_group: Any,
        dp_cp_group: Any,
        dev: Any,
        config: Any,
    ) -> RunResult:
        """Fetch, schedule, reroute, pack and broadcast one global batch.

        Returns ``(new_data_iterator, num_micro_batches, seqlen_sum, seqlen_squared_sum)``.
        """
        device = torch.device(dev) if dev is not None else torch.device("cpu")
        vpp = read_vpp(config)
        data_iterator = self._stage_iterator(data_iterator, vpp, pp_group, tp_group)
        samples: Optional[list[steps.Sample]] = None
        scalars: list[Any] = [None, None, None]
        if data_iterator is not None:
            samples, scalars = self._schedule_and_pack(
                data_iterator, num_microbatches, dp_group, tp_group, dp_cp_group, device
            )
        if group_rank(tp_group) == 0:
            samples, scalars = steps.broadcast_to_middle_stages(samples, scalars, pp_group, device)
            if scalars[0] is None:
                raise ConfigError(
                    "TP rank 0 of the first and the last pipeline stage needs a "
                    "data iterator (it got None)"
                )
        scalars = broadcast_scalars(
            scalars if group_rank(tp_group) == 0 else [0, 0, 0],
            tp_group,
            device,
            f"{steps.STEP}: broadcast of the microbatch count and sums over the TP group",
        )
        count = int(scalars[0])
        iterators = steps.make_iterators(
            samples, pp_group, tp_group, vpp if vpp is not None and vpp > 1 else None
        )
        return iterators, count, float(scalars[1]), float(scalars[2])

    def _stage_iterator(
        self, data_iterator: Any, vpp: Optional[int], pp_group: Any, tp_group: Any
    ) -> Any:
        stage, last = group_rank(pp_group), group_size(pp_group) - 1
        if vpp is not None and vpp > 1:
            if not isinstance(data_iterator, (list, tuple)) or len(data_iterator) != vpp:
                raise ConfigError(
                    f"with virtual_pipeline_model_parallel_size {vpp} the data "
                    f"iterator must be a list of {vpp} (one per vp stage)"
                )
            data_iterator = (
                data_iterator[0] if stage == 0 else (data_iterator[-1] if stage == last else None)
            )
        if data_iterator is not None and (group_rank(tp_group) != 0 or stage not in (0, last)):
            raise ConfigError(
                "only TP rank 0 of the first and the last pipeline stage may have "
                f"a data iterator; this rank is TP {group_rank(tp_group)}, PP "
                f"stage {stage}: pass None here"
            )
        return data_iterator

    def _schedule_and_pack(
        self,
        data_iterator: Any,
        num_microbatches: int,
        dp_group: Any,
        tp_group: Any,
        dp_cp_group: Any,
        device: torch.device,
    ) -> tuple[list[steps.Sample], list[Any]]:
        batch = steps.unpack_batch(steps.fetch_items(data_iterator, num_microbatches))
        steps.check_required_keys(batch, self.get_required_sample_keys())
        lengths, offsets = steps.global_lengths(batch, dp_group, device)
        schedule = self.get_groups_and_subsamples([(g, n) for g, n in enumerate(lengths)])
        placed = {int(i) for microbatch in schedule for ids in microbatch for i in ids}
        if placed != set(range(len(lengths))):
            raise PackingError(
                f"the schedule covers {len(placed)} of {len(lengths)} "
                "sub-samples; every sub-sample must be placed exactly once"
            )
        route = Route(schedule, offsets, dp_group, dp_cp_group)
        local = {offsets[route.my_dp] + i: s for i, s in enumerate(batch)}
        received = reroute(
            local,
            lengths,
            route,
            dp_cp_group,
            device,
            steps.DTYPES,
            steps.STEP,
            one_element_keys=steps.LENGTH_KEYS,
        )
        me = route.me
        packed = [
            steps.pack([received[int(i)] for i in microbatch[me]], device)
            for microbatch in schedule
        ]
        return packed, [len(schedule), float(sum(lengths)), float(sum(n * n for n in lengths))]


class DpBalancedScheduler(BasePackingScheduler):
    """Megatron's DP-balanced packing: original order, filled up to ``max_seqlen x cp``.

    Groups are packed in input order up to ``max_seqlen_per_dp_cp_rank * cp_size``
    tokens; then single sequences move off the last multi-sequence groups (never off
    group 0) until the group count is a multiple of ``dp_size *
    (microbatch_group_size_per_vp_stage or 1)``; microbatch ``i`` gives DP rank ``d``
    group ``i * dp_size + d``.  Deliberate difference: a sequence longer than
    ``max_seqlen_per_dp_cp_rank * cp_size`` raises PackingError (Megatron gives it a
    group of its own, or an empty group before it when it comes first).
    """

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> Schedule:
        """Pack one global batch in input order: ``[microbatch][dcp_rank] -> positions``.

        Args:
            sample_id_seqlens: ``(sample id, length)`` of every sequence of the global
                batch, in the order they came (lengths are ints >= 0; the ids are not
                read, the result names sequences by their position in this list).

        Returns:
            One list per microbatch, each with ``dp_size * cp_size`` entries: entry
            ``d * cp_size + c`` lists the positions DP rank ``d`` (and its CP rank ``c``,
            which shares them) packs into that microbatch, at most
            ``max_seqlen_per_dp_cp_rank * cp_size`` tokens.  The microbatch count is
            a multiple of ``microbatch_group_size_per_vp_stage`` (or 1).

        Raises:
            PackingError: a sequence longer than the limit, or too few sequences to
                make the group count a multiple of ``dp_size x
                microbatch_group_size_per_vp_stage``.
        """
        check_lengths(
            sample_id_seqlens, self.max_seq_len_all_ranks, "max_seqlen_per_dp_cp_rank x cp_size"
        )
        groups: list[list[int]] = []
        current: list[int] = []
        total = 0
        for position, (_, seqlen) in enumerate(sample_id_seqlens):
            if current and total + seqlen > self.max_seq_len_all_ranks:
                groups.append(current)
                current, total = [], 0
            current.append(position)
            total += int(seqlen)
        if current:
            groups.append(current)
        self._pad_group_count(groups)
        return self.spread(groups)

    def _pad_group_count(self, groups: list[list[int]]) -> None:
        """Split single sequences off the last groups until the count is a multiple."""
        short = (-len(groups)) % self.group_multiple
        index = len(groups) - 1
        while short > 0:
            if index <= 0:
                raise PackingError(
                    f"not enough sequences to make the {len(groups)} packed groups a multiple "
                    f"of dp_size x microbatch_group_size_per_vp_stage = {self.group_multiple} "
                    "(Megatron: 'Not enough samples to move'); give each DP rank more or shorter "
                    "sequences per global batch, or lower max_seqlen_per_dp_cp_rank"
                )
            if len(groups[index]) > 1:
                groups.append([groups[index].pop()])
                short -= 1
            else:
                index -= 1
