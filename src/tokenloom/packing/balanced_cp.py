"""Megatron's ``BalancedCPScheduler``: groups of sub-samples balanced over DP x CP ranks.

Same results as megatron-core 0.16.1's
``megatron.core.pipeline_parallel.hybrid_cp_schedule.BalancedCPScheduler`` on every
input it accepts (golden ``balanced_cp_scheduler.json``).  A sequence of length
``L`` runs on ``gpus_needed(L) = max(1, 2**ceil(log2(L / max_seq_len_per_rank)))``
ranks; its modelled work is ``L*L / gpus_needed(L)`` on each of them.

One scheduling round (:meth:`BalancedCPScheduler.next_hdp_group`) takes the
length-sorted list, cuts it into work buckets, places sequences one by one on the
least-loaded existing group of the right size or on fresh free ranks, stops once
the ranks are balanced within ``delta``, trims the last sequence off an overloaded
group when that helps, and finally widens groups onto ranks left empty.  Rounds
repeat on the leftovers until every sequence has a microbatch.

Differences, all on input Megatron rejects with a bare ``AssertionError`` or a
``ValueError('math domain error')``: tokenloom raises :class:`ConfigError` up front
when the DP x CP size is not a power of two, and :class:`PackingError` for a length
below 1 or above ``max_seq_len_per_rank * dp_cp_size``.  The scheduler needs no
process group: ``dp_cp_group`` may be a group, anything with ``size()``, or an int.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Optional

from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing.groups import group_size

Item = tuple[Hashable, int]
Groups = list[list[list[Any]]]
Estimator = Callable[..., float]
"""``compute_estimator(seq_len[, cp_size])``: the modelled work of one sequence."""


class _Round:
    """Mutable state of one scheduling round (one microbatch of all ranks)."""

    def __init__(self, total: int) -> None:
        self.seqlens: list[list[int]] = [[] for _ in range(total)]
        self.times: list[float] = [0.0] * total
        self.ids: list[list[Hashable]] = [[] for _ in range(total)]
        self.owner: list[Optional[int]] = [None] * total
        self.members: dict[int, list[int]] = {}
        self.size: dict[int, int] = {}

    def free_ranks(self) -> list[int]:
        return [r for r, gid in enumerate(self.owner) if gid is None]

    def gids_of_size(self, needed: int) -> list[int]:
        return [gid for gid, size in self.size.items() if size == needed]


class BalancedCPScheduler:
    """Form microbatches whose sub-samples load every DP x CP rank about equally."""

    def __init__(self, max_seq_len_per_rank: int, dp_cp_group: Any) -> None:
        if (
            isinstance(max_seq_len_per_rank, bool)
            or not isinstance(max_seq_len_per_rank, numbers.Integral)
            or max_seq_len_per_rank < 1
        ):
            raise ConfigError(
                f"max_seq_len_per_rank (config.max_seqlen_per_dp_cp_rank) must be a positive "
                f"int, got {max_seq_len_per_rank!r}"
            )
        total = group_size(dp_cp_group)
        if total < 1 or total & (total - 1):
            raise ConfigError(
                f"BalancedCPScheduler needs a DP x CP size that is a power of two (its groups "
                f"have 1, 2, 4, ... ranks); dp_cp_group has {total} ranks: change "
                "data_parallel_size or context_parallel_size"
            )
        self.max_seq_len_per_rank: int = int(max_seq_len_per_rank)
        self.total_hdp_gpus: int = total

    def gpus_needed(self, seq_len: int) -> int:
        """Ranks a sequence of ``seq_len`` tokens needs: a power of two, at least 1."""
        return max(1, 2 ** math.ceil(math.log2(seq_len / self.max_seq_len_per_rank)))

    def get_total_workload(self, seq_length: int, cp_size: Optional[int] = None) -> float:
        """Modelled work of a sub-sample on each of its ``cp_size`` ranks: ``L*L / cp_size``."""
        if cp_size is None:
            cp_size = self.gpus_needed(seq_length)
        return (seq_length * seq_length) / cp_size

    def check_lengths(self, sample_id_seqlens: Sequence[Item]) -> None:
        """Raise PackingError for a length that cannot be scheduled."""
        limit = self.max_seq_len_per_rank * self.total_hdp_gpus
        for position, entry in enumerate(sample_id_seqlens):
            if len(entry) != 2:
                raise PackingError(
                    f"sample_id_seqlens[{position}] must be (sample_id, seqlen), got {entry!r}"
                )
            sample_id, seqlen = entry
            if isinstance(seqlen, bool) or not isinstance(seqlen, numbers.Integral) or seqlen < 1:
                raise PackingError(
                    f"sample {sample_id!r} has length {seqlen!r}; every length "
                    "must be an int >= 1 (drop empty sub-samples first)"
                )
            if seqlen > limit:
                raise PackingError(
                    f"sample {sample_id!r} has {seqlen} tokens, more than max_seq_len_per_rank "
                    f"{self.max_seq_len_per_rank} x {self.total_hdp_gpus} ranks = {limit}; "
                    "raise max_seqlen_per_dp_cp_rank or split the sequence"
                )

    def get_groups_and_subsamples(
        self, sample_id_seqlens: Sequence[Item], config: Any = None
    ) -> tuple[Groups, Groups]:
        """Return ``(seqlen_groups, sample_id_groups)``: ``[microbatch][rank] -> list``."""
        self.check_lengths(sample_id_seqlens)
        pending: list[Item] = sorted(
            ((sid, int(n)) for sid, n in sample_id_seqlens), key=lambda item: item[1], reverse=True
        )
        seqlen_groups: Groups = []
        sample_id_groups: Groups = []
        while pending:
            seqlens, pending, _, ids = self.next_hdp_group(
                pending, self.get_total_workload, self.total_hdp_gpus
            )
            seqlen_groups.append(list(seqlens))
            sample_id_groups.append(list(ids))
        return seqlen_groups, sample_id_groups

    # -- one round -------------------------------------------------------------------

    def make_buckets_equal(
        self, sample_seqlens: Sequence[Item], compute_estimator: Estimator
    ) -> list[deque[Item]]:
        """Cut the sorted ``(id, length)`` items into one run of similar total work (as
        ``compute_estimator(length[, cp_size])`` models it) per distinct rank count."""
        items = sample_seqlens
        k = len({self.gpus_needed(n) for _, n in items})
        target = sum(compute_estimator(n, self.gpus_needed(n)) for _, n in items) / k
        buckets: list[deque[Item]] = []
        current: list[Item] = []
        current_work, remaining_k = 0.0, k
        for i, item in enumerate(items):
            work = compute_estimator(item[1])
            closing = current_work + work > target * 1.1 or len(items) - i <= remaining_k - len(
                buckets
            )
            if current and closing:
                buckets.append(deque(current))
                current, current_work = [], 0.0
                remaining_k -= 1
            current.append(item)
            current_work += work
        if current:
            buckets.append(deque(current))
        return buckets

    def next_hdp_group(
        self,
        sample_seqlens: list[Item],
        compute_estimator: Estimator,
        total_gpus: int,
        delta: float = 0.05,
        strategy: str = "dp",
        eps_bucket: float = 0.10,
    ) -> tuple[list[list[int]], list[Item], list[float], list[list[Hashable]]]:
        """Schedule one microbatch; return ``(seqlens, leftovers, exec_times, sample_ids)``.

        ``strategy="dp"`` scans the buckets from the first for a sequence that fits,
        ``"pp"`` round-robin from the bucket after the last one used (megatron-core's
        two orders); ``eps_bucket`` is accepted and unused, as in megatron-core."""
        if strategy not in ("dp", "pp"):
            raise ConfigError(f"strategy={strategy!r}: must be 'dp' or 'pp'")
        items, state = sample_seqlens, _Round(total_gpus)
        if not items:
            return state.seqlens, [], state.times, state.ids
        buckets = self.make_buckets_equal(items, compute_estimator)
        first_needed: Optional[int] = None
        check_balance, cursor = False, 0
        while buckets:
            picked = self._pick(buckets, state, cursor if strategy == "pp" else None)
            if picked is None:
                break
            bucket_index, (sample_id, seqlen) = picked
            if strategy == "pp":
                cursor = (bucket_index + 1) % len(buckets)
            needed = self.gpus_needed(seqlen)
            first_needed = needed if first_needed is None else first_needed
            self._place(state, sample_id, seqlen, needed, compute_estimator(seqlen))
            buckets[bucket_index].popleft()
            while buckets and not buckets[0]:
                buckets.pop(0)
                cursor %= max(1, len(buckets))
            check_balance = check_balance or needed < first_needed
            high = max(state.times)
            if check_balance and buckets and high - min(state.times) <= delta * high:
                break
        leftovers = [item for bucket in buckets for item in bucket]
        self._trim_overload(state, leftovers, delta, compute_estimator)
        before = sum(len(s) for s in state.seqlens)
        self._fill_empty(state)
        if sum(len(s) for s in state.seqlens) < before:
            raise PackingError(
                "BalancedCPScheduler lost sub-samples while widening groups onto "
                "empty ranks (Megatron asserts here); use another scheduler"
            )
        return state.seqlens, leftovers, state.times, state.ids

    def _pick(
        self, buckets: list[deque[Item]], state: _Round, cursor: Optional[int]
    ) -> Optional[tuple[int, Item]]:
        """First bucket head (from bucket 0, or round-robin from ``cursor``) that fits an
        existing group or enough free ranks."""
        start = 0 if cursor is None else cursor
        for index in [(start + i) % len(buckets) for i in range(len(buckets))]:
            bucket = buckets[index]
            if not bucket:
                continue
            needed = self.gpus_needed(bucket[0][1])
            if state.gids_of_size(needed) or len(state.free_ranks()) >= needed:
                return index, bucket[0]
        return None

    def _place(
        self, state: _Round, sample_id: Hashable, seqlen: int, needed: int, cost: float
    ) -> None:
        """Put a sequence on the least-loaded matching group, or on fresh free ranks."""
        best_gid: Optional[int] = None
        best_load = float("inf")
        for gid in state.gids_of_size(needed):
            load = max(state.times[r] for r in state.members[gid])
            if load < best_load:
                best_gid, best_load = gid, load
        free = state.free_ranks()
        if len(free) >= needed:
            fresh = sorted(free, key=lambda r: state.times[r])[:needed]
            if state.times[fresh[-1]] < best_load:
                best_gid = len(state.members)
                state.members[best_gid], state.size[best_gid] = fresh, needed
                for r in fresh:
                    state.owner[r] = best_gid
        if best_gid is None:
            raise PackingError(f"no ranks for sample {sample_id!r} of length {seqlen}")
        for r in state.members[best_gid]:
            state.seqlens[r].append(seqlen)
            state.times[r] += cost
            state.ids[r].append(sample_id)

    def _trim_overload(
        self, state: _Round, leftovers: list[Item], delta: float, compute_estimator: Estimator
    ) -> None:
        """Take the last sequence off the most loaded group while that reduces the slack."""
        while True:
            high, low = max(state.times), min(state.times)
            slack = high - low
            if slack <= delta * high or low == 0:
                return
            top = state.times.index(high)
            gid = state.owner[top]
            if gid is None or len(state.seqlens[top]) <= 1:
                return
            seqlen = state.seqlens[top][-1]
            cost = compute_estimator(seqlen)
            projected = state.times[:]
            for r in state.members[gid]:
                projected[r] -= cost
            if not max(projected) - min(projected) < slack:
                return
            sample_id = state.ids[top][-1]
            for r in state.members[gid]:
                state.seqlens[r].pop()
                state.times[r] -= cost
                state.ids[r].pop()
            leftovers.append((sample_id, seqlen))

    def _fill_empty(self, state: _Round) -> None:
        """Widen the smallest groups (doubling them) until no rank is left without work."""
        for _ in range(4 * len(state.seqlens) + 4):
            if all(state.seqlens):
                return
            if not state.size:
                raise PackingError("no sub-sample could be placed on any rank")
            self._widen_one(state)
        raise PackingError("BalancedCPScheduler could not fill every rank")

    def _widen_one(self, state: _Round) -> None:
        total = len(state.seqlens)
        smallest = min(state.size.values())
        wider = min(smallest * 2, total)
        grow = wider - smallest
        gid = next(g for g, size in state.size.items() if size == smallest)
        first, last = state.members[gid][0], state.members[gid][-1]
        empty = next(i for i, s in enumerate(state.seqlens) if not s)
        if grow == 0 or last + grow + max(0, empty - last - 1) >= total:
            raise PackingError(
                "BalancedCPScheduler cannot widen a group onto the empty ranks; "
                "use another scheduler or a different max_seqlen_per_dp_cp_rank"
            )
        seqlens: list[list[int]] = [[] for _ in range(total)]
        times = [0.0] * total
        ids: list[list[Hashable]] = [[] for _ in range(total)]
        for i in range(first):
            seqlens[i], times[i], ids[i] = state.seqlens[i], state.times[i], state.ids[i]
        shared_cost = self.get_total_workload(state.seqlens[last][0], wider)
        for i in range(first, last + grow + 1):
            seqlens[i], times[i], ids[i] = state.seqlens[last], shared_cost, state.ids[last]
        for offset, source in enumerate(range(last + 1, empty)):
            target = last + grow + 1 + offset
            seqlens[target], times[target] = state.seqlens[source], state.times[source]
            ids[target] = state.ids[source]
        state.size[gid] = wider
        state.members[gid] = list(range(first, last + grow + 1))
        for other in state.size:
            if other > gid:
                state.members[other] = [r + grow for r in state.members[other]]
        state.seqlens, state.times, state.ids = seqlens, times, ids
