"""``CostBalancedScheduler``: balance the modelled step time of every DP x CP rank.

The modelled time of a sequence of ``L`` tokens is ``token_cost * L + attention_cost
* L**2`` (linear layers plus attention), split evenly over the ``cp_size`` ranks of
its DP rank.  Megatron's DpBalanced packs in input order and is blind to the
quadratic term; this scheduler:

1. assigns sequences to DP ranks longest-processing-time first (a heap);
2. evens out the sequence counts (every DP rank needs as many sequences as
   microbatches), moving the cheapest sequences;
3. improves the busiest rank by moves and swaps with the idlest one (vectorised);
4. packs each rank's sequences into the same number of microbatches (a multiple of
   ``microbatch_group_size_per_vp_stage``), worst-fit decreasing under the
   ``max_seqlen_per_dp_cp_rank * cp_size`` token limit.

Its output has DpBalanced's shape, so ``run()`` and ``wrap_data_iterator`` use it
unchanged (``config.sequence_packing_scheduler = "cost_balanced"``).
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing.balance import check_costs
from tokenloom.packing.schedulers import BasePackingScheduler, Schedule, check_lengths

DEFAULT_TOKEN_COST = 1.0
DEFAULT_ATTENTION_COST = 1.0 / 4096


def model_costs(num_layers: int, hidden_size: int, num_parameters: float) -> tuple[float, float]:
    """``(token_cost, attention_cost)`` of a GPT model, in training FLOPs (fwd + bwd, causal)."""
    for name, value in (("num_layers", num_layers), ("hidden_size", hidden_size)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    if (
        isinstance(num_parameters, bool)
        or not isinstance(num_parameters, numbers.Real)
        or not math.isfinite(num_parameters)
        or num_parameters <= 0
    ):
        raise ConfigError(f"num_parameters must be a finite number > 0, got {num_parameters!r}")
    return 6.0 * float(num_parameters), 6.0 * int(num_layers) * int(hidden_size)


class CostBalancedScheduler(BasePackingScheduler):
    """Packing scheduler that balances tokens + attention cost over DP x CP ranks.

    The first four arguments are :class:`BasePackingScheduler`'s (positive ints;
    ``microbatch_group_size_per_vp_stage`` may be None).  ``token_cost`` and
    ``attention_cost`` are finite, >= 0 and not both 0 (:func:`model_costs` gives a
    model's); ``max_rounds`` (an int >= 0) bounds the swap/move rounds of step 3, 0
    skipping them.  Anything else is a ConfigError.
    """

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank: int,
        cp_size: int,
        dp_size: int,
        microbatch_group_size_per_vp_stage: Optional[int],
        *,
        token_cost: float = DEFAULT_TOKEN_COST,
        attention_cost: float = DEFAULT_ATTENTION_COST,
        max_rounds: int = 256,
    ) -> None:
        super().__init__(
            max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage
        )
        self.token_cost, self.attention_cost = check_costs(token_cost, attention_cost)
        if (
            isinstance(max_rounds, bool)
            or not isinstance(max_rounds, numbers.Integral)
            or max_rounds < 0
        ):
            raise ConfigError(
                f"max_rounds must be an int >= 0 (0: no improvement rounds), got {max_rounds!r}"
            )
        self.max_rounds: int = int(max_rounds)

    def sequence_cost(self, lengths: numpy.ndarray) -> numpy.ndarray:
        """Modelled time of each sequence on one DP rank (all its CP ranks together)."""
        lengths = lengths.astype(numpy.float64)
        return self.token_cost * lengths + self.attention_cost * lengths * lengths

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> Schedule:
        """Schedule one global batch so that every DP rank gets about the same modelled
        time (steps 1-4 of the module docstring), in :class:`DpBalancedScheduler`'s shape.

        Args:
            sample_id_seqlens: ``(sample id, length)`` of every sequence of the global
                batch (lengths are ints >= 0; the result names sequences by their
                position in this list, not by id).

        Returns:
            ``[microbatch][dcp_rank] -> positions``: one list per microbatch with
            ``dp_size * cp_size`` entries, entry ``d * cp_size + c`` holding what DP
            rank ``d`` (shared by its CP ranks) packs, at most
            ``max_seqlen_per_dp_cp_rank * cp_size`` tokens; every DP rank gets the same
            number of microbatches, a multiple of ``microbatch_group_size_per_vp_stage``
            (or 1).  An empty batch gives ``[]``.  :func:`rank_times` and
            :func:`imbalance` measure the result.

        Raises:
            PackingError: a sequence longer than the limit, fewer sequences than
                ``dp_size x microbatch_group_size_per_vp_stage``, or sequences that
                cannot fit the limit in any number of microbatches.
        """
        check_lengths(
            sample_id_seqlens, self.max_seq_len_all_ranks, "max_seqlen_per_dp_cp_rank x cp_size"
        )
        if not sample_id_seqlens:
            return []
        lengths = numpy.fromiter((n for _, n in sample_id_seqlens), dtype=numpy.int64)
        need = self.group_multiple
        if lengths.size < need:
            raise PackingError(
                f"{lengths.size} sequences cannot fill dp_size x "
                f"microbatch_group_size_per_vp_stage = {need} microbatch groups; give each "
                "global batch more sequences"
            )
        costs = self.sequence_cost(lengths)
        per_rank = self._assign(costs)
        count = self._microbatch_count(lengths)
        as_ints = lengths.tolist()
        while True:
            _even_counts(per_rank, costs, count)
            _improve(per_rank, costs, self.max_rounds, count)
            bins = [_fill_bins(r, as_ints, count, self.max_seq_len_all_ranks) for r in per_rank]
            if all(b is not None for b in bins):
                break
            count += self._step()
            if count * self.dp_size > lengths.size:
                raise PackingError("the sequences do not fit the token limit per microbatch")
        return _layout([b for b in bins if b is not None], self.cp_size, costs)

    def _step(self) -> int:
        return self.microbatch_group_size_per_vp_stage or 1

    def _assign(self, costs: numpy.ndarray) -> list[list[int]]:
        """Longest-processing-time first: each sequence to the least loaded DP rank."""
        order = numpy.argsort(-costs, kind="stable")
        heap = [(0.0, rank) for rank in range(self.dp_size)]
        per_rank: list[list[int]] = [[] for _ in range(self.dp_size)]
        for position in order.tolist():
            load, rank = heapq.heappop(heap)
            per_rank[rank].append(position)
            heapq.heappush(heap, (load + float(costs[position]), rank))
        return per_rank

    def _microbatch_count(self, lengths: numpy.ndarray) -> int:
        """Fewest microbatches per DP rank the token limit allows, as a multiple of the step."""
        tokens = int(lengths.sum())
        least = max(1, -(-tokens // (self.dp_size * self.max_seq_len_all_ranks)))
        step = self._step()
        return -(-least // step) * step


def _even_counts(per_rank: list[list[int]], costs: numpy.ndarray, count: int) -> None:
    """Give ranks with fewer than ``count`` sequences the cheapest spare ones of the others."""
    short = [rank for rank in per_rank if len(rank) < count]
    if not short:
        return
    spare = [
        (float(costs[p]), d, p)
        for d, rank in enumerate(per_rank)
        if len(rank) > count
        for p in rank
    ]
    spare.sort()
    left = {d: len(rank) - count for d, rank in enumerate(per_rank) if len(rank) > count}
    for needy in short:
        while len(needy) < count:
            while spare and left[spare[0][1]] == 0:
                spare.pop(0)
            if not spare:
                raise PackingError(
                    f"not enough sequences to give every DP rank {count} microbatches"
                )
            _, donor, position = spare.pop(0)
            per_rank[donor].remove(position)
            left[donor] -= 1
            needy.append(position)


def _improve(per_rank: list[list[int]], costs: numpy.ndarray, rounds: int, count: int) -> None:
    """Swap (or move) sequences between the busiest and the idlest rank while the peak drops.

    A move is allowed only while the busy rank keeps at least ``count`` sequences.
    """
    loads = numpy.array([costs[r].sum() if r else 0.0 for r in per_rank])
    for _ in range(rounds):
        high, low = int(loads.argmax()), int(loads.argmin())
        gap = loads[high] - loads[low]
        if gap <= 1e-3 * loads[high]:
            return
        a = costs[per_rank[high]]
        b = costs[per_rank[low]]
        if len(per_rank[high]) > count:
            b = numpy.append(b, 0.0)
        delta = a[:, None] - b[None, :]
        gain = numpy.minimum(delta, gap - delta)
        best = int(gain.argmax())
        i, j = divmod(best, b.size)
        if gain.flat[best] <= 1e-12 * loads[high]:
            return
        if j == len(per_rank[low]):
            per_rank[low].append(per_rank[high].pop(i))
        else:
            per_rank[high][i], per_rank[low][j] = per_rank[low][j], per_rank[high][i]
        loads[high] -= delta[i, j]
        loads[low] += delta[i, j]


def _fill_bins(
    positions: list[int], lengths: list[int], count: int, cap: int
) -> Optional[list[list[int]]]:
    """Exactly ``count`` non-empty bins of at most ``cap`` tokens, or None.

    Worst-fit decreasing (even bins) first; when that overflows, first-fit decreasing
    with bins split (smallest sequence out) until there are ``count`` of them.
    """
    order = sorted(positions, key=lambda p: -lengths[p])
    bins: list[list[int]] = [[] for _ in range(count)]
    heap = [(0, 0, b) for b in range(count)]
    for position in order:
        tokens, size, b = heapq.heappop(heap)
        if tokens + lengths[position] > cap:
            return _first_fit(order, lengths, count, cap)
        bins[b].append(position)
        heapq.heappush(heap, (tokens + lengths[position], size + 1, b))
    return bins if all(bins) else None


def _first_fit(
    order: list[int], lengths: list[int], count: int, cap: int
) -> Optional[list[list[int]]]:
    bins: list[list[int]] = []
    room: list[int] = []
    for position in order:
        n = lengths[position]
        target = next((b for b, free in enumerate(room) if free >= n), None)
        if target is None:
            bins.append([])
            room.append(cap)
            target = len(bins) - 1
        bins[target].append(position)
        room[target] -= n
    if len(bins) > count:
        return None
    while len(bins) < count:
        donor = max(bins, key=len)
        if len(donor) < 2:
            return None
        bins.append([donor.pop()])
    return bins


def _layout(bins: list[list[list[int]]], cp_size: int, costs: numpy.ndarray) -> Schedule:
    """``[microbatch][dcp_rank]``: each DP rank's bins, costliest first, shared by its CP ranks."""
    ordered = [
        sorted((sorted(b) for b in rank_bins), key=lambda b: -float(costs[b].sum()))
        for rank_bins in bins
    ]
    return [
        [ordered[j // cp_size][i] for j in range(cp_size * len(ordered))]
        for i in range(len(ordered[0]))
    ]
