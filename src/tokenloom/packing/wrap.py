"""``wrap_data_iterator``: choose a packing scheduler by name and run it on a global batch."""

from __future__ import annotations

from typing import Any, Optional

from tokenloom import plugins
from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.packing._comm import resolve_device
from tokenloom.packing.cost_balanced import CostBalancedScheduler
from tokenloom.packing.groups import group_size, require_groups
from tokenloom.packing.schedulers import (
    BasePackingScheduler,
    DpBalancedScheduler,
    RunResult,
    read_vpp,
)

SCHEDULERS: dict[str, type[BasePackingScheduler]] = {
    "dp_balanced": DpBalancedScheduler,
    "cost_balanced": CostBalancedScheduler,
}
"""The built-in scheduler classes by ``config.sequence_packing_scheduler`` name (read-only
table); installed plugins add theirs (entry points of ``tokenloom.packing_schedulers``,
:mod:`tokenloom.plugins`)."""
PLUGIN_GROUP = "tokenloom.packing_schedulers"


def scheduler_class(name: str) -> type[BasePackingScheduler]:
    """The scheduler class called ``name``: a built-in (any case), else an installed
    plugin's (exact name)."""
    if name.lower() in SCHEDULERS:
        return SCHEDULERS[name.lower()]
    plugin = plugins.find(PLUGIN_GROUP, name, SCHEDULERS)
    if plugin is None:
        known = sorted(SCHEDULERS) + plugins.names(PLUGIN_GROUP, SCHEDULERS)
        raise ConfigError(f"sequence_packing_scheduler {name!r} is not one of {known}")
    cls = plugins.load(plugin)
    if not (isinstance(cls, type) and issubclass(cls, BasePackingScheduler)):
        raise ConfigError(
            f"packing scheduler plugin {name!r} ({plugin.value}, from {plugin.distribution}) "
            "is not a tokenloom.packing.BasePackingScheduler subclass"
        )
    return cls


def make_scheduler(config: Any, cp_size: int, dp_size: int) -> BasePackingScheduler:
    """The scheduler ``config.sequence_packing_scheduler`` names, built from ``config``."""
    name = str(read_attribute(config, "sequence_packing_scheduler", "dp_balanced"))
    cls = scheduler_class(name)
    limit = read_attribute(config, "max_seqlen_per_dp_cp_rank", None)
    if limit is None:
        raise ConfigError("config.max_seqlen_per_dp_cp_rank is required for sequence packing")
    vpp = read_vpp(config)
    group = (
        None if vpp is None else read_attribute(config, "microbatch_group_size_per_vp_stage", None)
    )
    return cls(limit, cp_size, dp_size, group)


def wrap_data_iterator(
    data_iterator: Any,
    config: Any,
    num_microbatches: int,
    pg_collection: Any = None,
    *,
    device: Any = None,
    scheduler: Optional[BasePackingScheduler] = None,
) -> RunResult:
    """Schedule one global batch over DP x CP and return Megatron's 4-tuple.

    ``(iterator, num_microbatches, seqlen_sum, seqlen_squared_sum)``: the iterator (a
    list of ``vpp`` iterators with VPP, None on TP ranks > 0) yields packed THD
    microbatches for :func:`get_batch_on_this_rank_for_sequence_packing`.  ``device``
    is where tensors are staged (default: the current CUDA device for NCCL groups,
    else the CPU); ``scheduler`` overrides the one the config names.
    """
    groups = require_groups(pg_collection, ("dp_cp", "dp", "tp", "pp"))
    dp_size, dcp_size = group_size(groups["dp"]), group_size(groups["dp_cp"])
    if dcp_size % dp_size:
        raise ConfigError(
            f"the DP x CP group ({dcp_size} ranks) is not a multiple of the DP "
            f"group ({dp_size} ranks)"
        )
    if (
        isinstance(num_microbatches, bool)
        or not isinstance(num_microbatches, int)
        or num_microbatches < 1
    ):
        raise ConfigError(f"num_microbatches must be a positive int, got {num_microbatches!r}")
    chosen = scheduler or make_scheduler(config, dcp_size // dp_size, dp_size)
    dev = resolve_device(device, groups["dp_cp"])
    return chosen.run(
        data_iterator,
        num_microbatches,
        groups["dp"],
        groups["tp"],
        groups["pp"],
        groups["dp_cp"],
        dev,
        config,
    )
