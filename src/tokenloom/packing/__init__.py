"""Sequence packing across DP x CP ranks: Megatron's schedulers, THD batches, and a better balance.

* :class:`BalancedCPScheduler` and :class:`HybridCPDataLoaderWrapper` (megatron-core
  0.16.1's hybrid context parallel packing);
* :class:`BasePackingScheduler`, :class:`DpBalancedScheduler`,
  :func:`wrap_data_iterator` and :func:`get_batch_on_this_rank_for_sequence_packing`
  (Megatron-LM's sequence packing, commit d98e8a64);
* :class:`CostBalancedScheduler`: balances tokens + attention cost (tokenloom's own);
* :class:`PackedSeqParams`, :func:`thd_partitioned_indices` (the CP split of THD
  sequences, no Transformer Engine needed), and :func:`build_pg_collection` for the
  process groups in Megatron's default rank order.

Everything runs on CPU tensors with gloo and on CUDA with NCCL; the device is a
parameter.  See docs/packing.md.
"""

from __future__ import annotations

from tokenloom.packing.balance import imbalance, rank_times
from tokenloom.packing.balanced_cp import BalancedCPScheduler
from tokenloom.packing.batch import get_batch_on_this_rank_for_sequence_packing
from tokenloom.packing.cost_balanced import CostBalancedScheduler, model_costs
from tokenloom.packing.groups import (
    ProcessGroupCollection,
    SingleRankGroup,
    build_pg_collection,
    layout_groups,
    rank_coordinates,
)
from tokenloom.packing.hybrid_cp import HybridCPDataLoaderWrapper
from tokenloom.packing.params import PackedSeqParams
from tokenloom.packing.schedulers import BasePackingScheduler, DpBalancedScheduler
from tokenloom.packing.thd import thd_padding_mask, thd_partitioned_indices
from tokenloom.packing.wrap import SCHEDULERS, make_scheduler, wrap_data_iterator

__all__ = [
    "BalancedCPScheduler",
    "BasePackingScheduler",
    "CostBalancedScheduler",
    "DpBalancedScheduler",
    "HybridCPDataLoaderWrapper",
    "PackedSeqParams",
    "ProcessGroupCollection",
    "SCHEDULERS",
    "SingleRankGroup",
    "build_pg_collection",
    "get_batch_on_this_rank_for_sequence_packing",
    "imbalance",
    "layout_groups",
    "make_scheduler",
    "model_costs",
    "rank_coordinates",
    "rank_times",
    "thd_padding_mask",
    "thd_partitioned_indices",
    "wrap_data_iterator",
]
