"""Process groups for packing: a small collection object and Megatron's default layout.

``ProcessGroupCollection`` holds the ``tp``, ``cp``, ``dp``, ``dp_cp`` and ``pp``
groups that the packing schedulers use (the fields of megatron-core's class of the
same name that packing reads).  :func:`build_pg_collection` builds every group of a
world in Megatron's default ``tp-cp-ep-dp-pp`` rank order (EP = 1)::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

so users without Megatron's ``parallel_state`` get the same groups.  A group may
also be a :class:`SingleRankGroup`, which lets every packing function run in one
process without ``torch.distributed`` (all collectives over it are no-ops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError


class SingleRankGroup:
    """A one-member group usable without ``torch.distributed`` (collectives are no-ops)."""

    def __init__(self, global_rank: int = 0) -> None:
        self.global_rank = global_rank

    def size(self) -> int:
        """Number of members (always 1)."""
        return 1

    def rank(self) -> int:
        """This process's position in the group (always 0)."""
        return 0

    def __repr__(self) -> str:
        return f"SingleRankGroup(global_rank={self.global_rank})"


@dataclass(frozen=True)
class ProcessGroupCollection:
    """The process groups the packing path reads (Megatron's ``pg_collection`` fields)."""

    tp: Any
    """Tensor-parallel group: TP rank 0 reads data, the others get it by broadcast."""
    cp: Any
    """Context-parallel group: its ranks split every THD sequence into chunks."""
    dp: Any
    """Data-parallel group (ranks with the same TP, CP and PP rank)."""
    dp_cp: Any
    """Data x context parallel group, ordered by ``cp_rank + cp * dp_rank``."""
    pp: Any
    """Pipeline-parallel group (stage 0 first)."""


@dataclass(frozen=True)
class RankCoordinates:
    """Where a global rank sits in the TP/CP/DP/PP grid."""

    tp: int
    """Tensor-parallel rank."""
    cp: int
    """Context-parallel rank."""
    dp: int
    """Data-parallel rank."""
    pp: int
    """Pipeline-parallel rank."""


def _check_sizes(world_size: int, tp: int, cp: int, pp: int) -> int:
    for name, value in (
        ("world_size", world_size),
        ("tensor_model_parallel_size", tp),
        ("context_parallel_size", cp),
        ("pipeline_model_parallel_size", pp),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive int, got {value!r}")
    if world_size % (tp * cp * pp):
        raise ConfigError(
            f"world_size {world_size} is not divisible by tensor_model_parallel_size {tp} x "
            f"context_parallel_size {cp} x pipeline_model_parallel_size {pp} = {tp * cp * pp}; "
            "choose sizes whose product divides the number of processes"
        )
    return world_size // (tp * cp * pp)


def rank_coordinates(
    rank: int, world_size: int, tp: int = 1, cp: int = 1, pp: int = 1
) -> RankCoordinates:
    """Split a global rank into its TP, CP, DP and PP ranks (TP innermost, PP outermost)."""
    dp = _check_sizes(world_size, tp, cp, pp)
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is outside 0..{world_size - 1}")
    return RankCoordinates(
        tp=rank % tp, cp=(rank // tp) % cp, dp=(rank // (tp * cp)) % dp, pp=rank // (tp * cp * dp)
    )


def layout_groups(
    world_size: int, tp: int = 1, cp: int = 1, pp: int = 1
) -> dict[str, list[tuple[int, ...]]]:
    """Every group of each kind as tuples of global ranks, in Megatron's default order."""
    dp = _check_sizes(world_size, tp, cp, pp)

    def rank_of(t: int, c: int, d: int, p: int) -> int:
        return t + tp * (c + cp * (d + dp * p))

    groups: dict[str, list[tuple[int, ...]]] = {"tp": [], "cp": [], "dp": [], "dp_cp": [], "pp": []}
    for p in range(pp):
        for d in range(dp):
            for c in range(cp):
                groups["tp"].append(tuple(rank_of(t, c, d, p) for t in range(tp)))
    for p in range(pp):
        for t in range(tp):
            for d in range(dp):
                groups["cp"].append(tuple(rank_of(t, c, d, p) for c in range(cp)))
            for c in range(cp):
                groups["dp"].append(tuple(rank_of(t, c, d, p) for d in range(dp)))
            groups["dp_cp"].append(tuple(rank_of(t, c, d, p) for d in range(dp) for c in range(cp)))
    for t in range(tp):
        for d in range(dp):
            for c in range(cp):
                groups["pp"].append(tuple(rank_of(t, c, d, p) for p in range(pp)))
    return groups


def build_pg_collection(
    world_size: Optional[int] = None,
    tensor_model_parallel_size: int = 1,
    context_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    *,
    backend: Optional[str] = None,
) -> ProcessGroupCollection:
    """Create this rank's TP/CP/DP/DP x CP/PP groups with ``torch.distributed.new_group``.

    Must be called on every rank of an initialised default group, with the same
    arguments (``new_group`` is collective).  ``world_size`` defaults to the default
    group's size.  Without an initialised ``torch.distributed`` and a world of one, it
    returns :class:`SingleRankGroup` members.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        if world_size not in (None, 1):
            raise ConfigError(
                f"world_size {world_size} needs torch.distributed: call "
                "torch.distributed.init_process_group first"
            )
        one = SingleRankGroup()
        return ProcessGroupCollection(tp=one, cp=one, dp=one, dp_cp=one, pp=one)
    actual = dist.get_world_size()
    world = actual if world_size is None else world_size
    if world != actual:
        raise ConfigError(f"world_size {world} differs from torch.distributed's {actual}")
    me = dist.get_rank()
    mine: dict[str, Any] = {}
    for kind, members in layout_groups(
        world, tensor_model_parallel_size, context_parallel_size, pipeline_model_parallel_size
    ).items():
        for ranks in members:
            group = dist.new_group(list(ranks), backend=backend)
            if me in ranks:
                mine[kind] = group
    return ProcessGroupCollection(**mine)


def group_size(group: Any) -> int:
    """Size of a process group, of anything with ``size()``, or an int itself."""
    if isinstance(group, bool):
        raise ConfigError(f"a group size must be an int or a group, got {group!r}")
    if isinstance(group, int):
        return group
    size = read_attribute(group, "size", None)
    if not callable(size):
        raise ConfigError(f"expected a process group (with size()) or an int, got {group!r}")
    return int(size())


def group_rank(group: Any) -> int:
    """This process's rank inside ``group``."""
    return int(group.rank())


def group_ranks(group: Any) -> list[int]:
    """Global ranks of ``group``'s members, in group order."""
    if isinstance(group, SingleRankGroup):
        return [group.global_rank]
    import torch.distributed as dist

    return list(dist.get_process_group_ranks(group))


def require_groups(pg_collection: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The named groups of ``pg_collection``; a ConfigError names any that is missing."""
    if pg_collection is None:
        raise ConfigError(
            "pg_collection is required: tokenloom does not read Megatron's parallel_state; "
            "build one with tokenloom.packing.build_pg_collection(world_size, tp, cp, pp)"
        )
    found = {name: read_attribute(pg_collection, name, None) for name in names}
    missing = [name for name, group in found.items() if group is None]
    if missing:
        raise ConfigError(f"pg_collection lacks the group(s) {missing}; give it {list(names)}")
    return found
