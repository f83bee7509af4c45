"""Build in shares: every rank builds its part of a set of jobs, publishes it, then all load.

The distributed cold build (``BlendedMegatronDatasetConfig(build_on_all_ranks=True)``,
see :mod:`tokenloom.builder.cold_build`) hands :func:`build_in_shares` a list of jobs
(one per prefix of a blend) and a function that runs some of them and publishes their
results to a cache every rank sees. Four bounded steps, each ending in an exchange of
status records (``comm.all_gather``, as in :mod:`tokenloom.distributed.rank0`):

1. global rank 0 estimates every job's cost and partitions the jobs
   (:func:`partition`); every rank receives the same :class:`Shares`;
2. every rank runs its share and publishes it (written atomically, so a share is
   either whole in the cache or absent), then reports;
3. a failure on any rank is raised on every rank naming it; a rank that died (killed,
   crashed) is named by the exchange's roll call within the timeout, and the others
   raise a :class:`~tokenloom.errors.DistributedError` saying the published shares are
   kept, so a rerun builds only the rest;
4. every rank that wants the results runs the other ranks' jobs, which load what they
   published, and reports again (a failure while loading fails every rank).

:func:`partition` is longest processing time first: jobs by decreasing cost (ties by
position), each to the rank with the least cost so far (ties: the lowest rank). The
largest share is at most 4/3 of the optimum (Graham's bound).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any, Optional

from tokenloom.distributed.rank0 import Communicator, _exchange, _run, _Status
from tokenloom.errors import DistributedError

__all__ = ["Shares", "build_in_shares", "partition"]


class Shares:
    """A partition of ``len(costs)`` jobs over ``world_size`` ranks.

    Attributes:
        costs: each job's estimated cost.
        owners: ``owners[j]``, the rank that builds job ``j``.
        world_size: the number of ranks.
    """

    def __init__(self, costs: Sequence[float], owners: Sequence[int], world_size: int) -> None:
        self.costs = [float(c) for c in costs]
        self.owners = [int(o) for o in owners]
        self.world_size = int(world_size)

    def jobs_of(self, rank: int) -> list[int]:
        """The jobs ``rank`` builds, in job order."""
        return [job for job, owner in enumerate(self.owners) if owner == rank]

    def loads(self) -> list[float]:
        """Each rank's total estimated cost."""
        loads = [0.0] * self.world_size
        for job, owner in enumerate(self.owners):
            loads[owner] += self.costs[job]
        return loads

    def critical_path(self) -> float:
        """The largest rank's estimated cost (the build's wall time, in cost units)."""
        return max(self.loads(), default=0.0)


def partition(costs: Sequence[float], world_size: int) -> Shares:
    """Longest processing time first over ``world_size`` ranks (see the module docstring)."""
    if world_size < 1:
        raise DistributedError(f"world_size {world_size}: a partition needs at least 1 rank")
    heap = [(0.0, rank) for rank in range(world_size)]
    owners = [0] * len(costs)
    for job in sorted(range(len(costs)), key=lambda j: (-float(costs[j]), j)):
        load, rank = heapq.heappop(heap)
        owners[job] = rank
        heapq.heappush(heap, (load + float(costs[job]), rank))
    return Shares(costs, owners, world_size)


def _plan(
    comm: Communicator, costs: Callable[[], Sequence[float]], count: int, what: str
) -> Shares:
    """Step 1: rank 0's partition, on every rank."""
    status, error = _Status(comm.rank), None
    if comm.rank == 0:
        shares, status, error = _run(lambda: partition(costs(), comm.world_size), 0, what)
        if shares is not None:
            status = _Status(0, payload=(shares.owners, shares.costs))
    owners, planned = _exchange(comm, status, error, what, "while planning the shares")[0].payload
    if len(owners) != count:
        raise DistributedError(
            f"rank {comm.rank}: rank 0 planned {len(owners)} jobs for {what}, this rank has "
            f"{count}; every rank must build the same blend"
        )
    return Shares(planned, owners, comm.world_size)


def _published(
    comm: Communicator, status: _Status, error: Optional[BaseException], shares: Shares, what: str
) -> None:
    """Step 3: every rank learns whether every share was published."""
    try:
        _exchange(comm, status, error, what, "while building its share")
    except DistributedError as lost:
        if error is not None:
            raise
        raise DistributedError(
            f"rank {comm.rank}: the distributed cold build of {what} stopped: {lost}. The "
            f"shares published so far stay in the cache (each written atomically) and are "
            f"reused, so a rerun builds only the rest; build_on_all_ranks=False builds on "
            f"rank 0 alone"
        ) from lost


def build_in_shares(
    comm: Communicator,
    costs: Callable[[], Sequence[float]],
    run: Callable[[list[int]], list[Any]],
    count: int,
    built_here: bool,
    what: str,
) -> Optional[list[Any]]:
    """The results of ``count`` jobs, each run by one rank's share (see the module docstring).

    Args:
        comm: the ranks (every rank must call this, with the same ``count``).
        costs: the estimated cost of every job; called on rank 0 only.
        run: runs the given jobs and publishes their results; returns them in order.
        count: the number of jobs.
        built_here: whether this rank wants the results (False: it builds its share,
            takes part in every exchange and gets None).
        what: names the jobs in errors.
    """
    shares = _plan(comm, costs, count, what)
    mine = shares.jobs_of(comm.rank)
    built, status, error = _run(lambda: run(mine), comm.rank, what)
    _published(comm, status, error, shares, what)
    results: dict[int, Any] = dict(zip(mine, built or []))
    rest = [job for job in range(count) if job not in results]
    status, error, loaded = _Status(comm.rank), None, None
    if built_here and rest:
        loaded, status, error = _run(lambda: run(rest), comm.rank, what)
    _exchange(comm, status, error, what, "while loading the other ranks' shares")
    if not built_here:
        return None
    results.update(zip(rest, loaded or []))
    return [results[job] for job in range(count)]
