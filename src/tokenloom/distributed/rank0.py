"""Build on rank 0, then let the other ranks load: the one distributed dance of tokenloom.

Megatron-core builds every dataset on global rank 0 first (which writes the index
cache), waits at a bare ``torch.distributed.barrier()``, then constructs the
datasets on the other ranks, which now hit the cache.  Two things go wrong with a
bare barrier: a failure on rank 0 leaves every other rank waiting forever, and when
ranks do not share a filesystem (node-local caches) the other nodes try to read
files that exist only on rank 0's node.

:func:`build_on_rank0_then_load` does the same dance without those failure modes.
Every step ends with an exchange of a status record among all ranks (an
``all_gather`` of small Python objects) instead of a bare barrier, so:

1. rank 0 constructs; every rank learns whether it succeeded (and rank 0's error
   is raised on the other ranks as :class:`~tokenloom.errors.DistributedError`);
2. each other rank checks whether the cache rank 0 wrote is visible to it
   (``is_ready``); on every node where it is not, the node's local rank 0 builds;
3. the remaining ranks construct (loading from their now-populated cache; a rank
   that still cannot see a cache, e.g. because of a wrong ``LOCAL_RANK``, builds
   it itself, which is safe because cache writes are atomic).

Every rank takes part in every exchange whether or not it builds anything, so a
failure anywhere makes all ranks raise together instead of hanging.

Ranks and sizes are passed explicitly (``comm=``) or discovered from
``torch.distributed`` and the ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` environment
variables.  torch is imported only when a process group is actually in use.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from tokenloom.distributed.gather import bounded_all_gather
from tokenloom.distributed.timeout import check_timeout, default_timeout_s
from tokenloom.errors import CacheError, DistributedError, TokenloomError

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "Communicator",
    "build_on_rank0_then_load",
    "default_timeout_s",
    "get_communicator",
    "is_distributed",
]


@dataclass(frozen=True)
class Communicator:
    """Who this process is and how it talks to the others.

    ``all_gather`` takes a picklable object and returns the list of every rank's
    object, in rank order; it must be called by all ranks (it is a collective).
    """

    rank: int
    """Global rank of this process."""

    world_size: int
    """Number of processes taking part."""

    local_rank: int
    """Rank of this process among the processes sharing its filesystem (node)."""

    local_world_size: int
    """Number of processes sharing this process's filesystem (node)."""

    all_gather: Optional[Callable[[Any], list[Any]]] = field(default=None, repr=False)
    """Collective exchange of one picklable object per rank; None in a single process."""

    timeout_s: float = 1800.0
    """Seconds any exchange waits for the other ranks before a DistributedError naming
    the rank that did not answer (``TOKENLOOM_DISTRIBUTED_TIMEOUT_S``; it must cover
    rank 0's longest index build, which the other ranks wait for)."""

    @property
    def node_leader(self) -> int:
        """Global rank of this node's local rank 0 (ranks of a node are contiguous)."""
        return self.rank - self.local_rank


def is_distributed() -> bool:
    """True when a default torch.distributed process group is initialised.

    Looks at ``sys.modules`` instead of importing torch: a process group can only
    exist once ``torch.distributed`` has been imported, and importing torch costs
    over a second of start-up that a single-process user must not pay.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return False
    return dist.is_available() and dist.is_initialized()


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError as error:
        raise DistributedError(
            f"environment variable {name}={value!r} is not an integer; unset it or set it "
            f"to this process's local rank / local world size"
        ) from error


def get_communicator(
    *,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    local_rank: Optional[int] = None,
    local_world_size: Optional[int] = None,
    group: Any = None,
    timeout_s: Optional[float] = None,
) -> Communicator:
    """Describe this process: explicit arguments first, then torch.distributed, then env.

    Without an initialised process group the result is a single-process communicator
    (``world_size`` 1, no collectives) unless ``rank``/``world_size`` say otherwise,
    in which case collectives are unavailable and a :class:`DistributedError` is
    raised the first time one is needed.  ``timeout_s`` bounds every exchange (see
    :attr:`Communicator.timeout_s`).
    """
    all_gather = None
    timeout_s = default_timeout_s() if timeout_s is None else check_timeout(timeout_s)
    if is_distributed():
        import torch.distributed as dist

        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size(group) if world_size is None else world_size
        all_gather = bounded_all_gather(group, timeout_s)

    rank = 0 if rank is None else int(rank)
    world_size = 1 if world_size is None else int(world_size)
    if local_rank is None:
        local_rank = _env_int("LOCAL_RANK")
    if local_world_size is None:
        local_world_size = _env_int("LOCAL_WORLD_SIZE")
    if local_rank is None:
        local_rank = rank  # no topology known: assume one node (shared filesystem)
    if local_world_size is None:
        local_world_size = world_size
    _check_topology(rank, world_size, local_rank, local_world_size)
    return Communicator(rank, world_size, local_rank, local_world_size, all_gather, timeout_s)


def _check_topology(rank: int, world_size: int, local_rank: int, local_world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise DistributedError(f"rank {rank} is not in [0, world_size={world_size})")
    if local_world_size < 1 or not 0 <= local_rank < local_world_size or local_rank > rank:
        raise DistributedError(
            f"local rank {local_rank} / local world size {local_world_size} do not fit global "
            f"rank {rank} of {world_size}; check LOCAL_RANK and LOCAL_WORLD_SIZE"
        )


@dataclass(frozen=True)
class _Status:
    rank: int
    ok: bool = True
    error: str = ""
    payload: Any = None


def _run(construct: Callable[[], T], rank: int, what: str):
    """Call ``construct``; return (result, status, exception)."""
    try:
        return construct(), _Status(rank), None
    except BaseException as error:  # noqa: BLE001 - reported to every rank, then re-raised
        logger.debug("rank %d failed to build %s:\n%s", rank, what, traceback.format_exc())
        return None, _Status(rank, False, f"{type(error).__name__}: {error}"), error


def _reraise(error: BaseException, what: str) -> None:
    if isinstance(error, OSError) and not isinstance(error, TokenloomError):
        raise CacheError(
            f"could not write the index cache of {what}: {error}. Supply a directory you can "
            f"write to as path_to_cache (--path-to-cache / config path_to_cache) and retry"
        ) from error
    raise error


def _exchange(
    comm: Communicator, status: _Status, error: Optional[BaseException], what: str, step: str
) -> list[_Status]:
    """All-gather every rank's status; raise on every rank if any rank failed."""
    if comm.all_gather is None:  # build_on_rank0_then_load refuses such a comm up front
        raise DistributedError(
            f"rank {comm.rank} of {comm.world_size}: building {what} needs a collective, but "
            f"torch.distributed is not initialised; call torch.distributed.init_process_group first"
        )
    statuses = comm.all_gather(status)
    failed = [s for s in statuses if not s.ok]
    if not failed:
        return statuses
    if error is not None:
        _reraise(error, what)
    summary = "; ".join(f"rank {s.rank}: {s.error}" for s in failed)
    raise DistributedError(
        f"rank {comm.rank} stops because building {what} failed {step} on another rank "
        f"({summary}). Fix the error reported by that rank and rerun"
    )


def build_on_rank0_then_load(
    construct: Callable[[], T],
    *,
    is_built_on_rank: Callable[[], bool] = lambda: True,
    synchronize: bool = True,
    manifest: Optional[Callable[[T], Any]] = None,
    is_ready: Optional[Callable[[Any], bool]] = None,
    comm: Optional[Communicator] = None,
    what: str = "the datasets",
) -> Optional[T]:
    """Construct on rank 0 first, then on the other ranks, failing together, never hanging.

    Args:
        construct: builds the object, writing the cache on a miss and loading it on a
            hit (a dataset constructor, typically).  Called at most once per rank.
        is_built_on_rank: False on ranks that need no object; they take part in the
            exchanges and get None.
        synchronize: False skips every exchange: each rank constructs on its own
            (megatron-core's ``fast_cache_load`` behaviour, where caches already exist).
        manifest: maps rank 0's result to a small picklable description of its cache
            (e.g. the cache file names), handed to ``is_ready`` on the other ranks.
        is_ready: given rank 0's manifest, True when this rank can see that cache.
            Defaults to True (a filesystem shared by all ranks).
        comm: who this process is; defaults to :func:`get_communicator`.
        what: names the object in error messages.

    Without a process group (or with one rank) this is ``construct()``.
    """
    comm = comm or get_communicator()
    if comm.world_size == 1 or not synchronize:
        if comm.world_size > 1 and not is_built_on_rank():
            return None
        return construct()
    if comm.all_gather is None:
        raise DistributedError(
            f"rank {comm.rank} of {comm.world_size}: building {what} needs a collective, but "
            f"torch.distributed is not initialised; call torch.distributed.init_process_group first"
        )
    state = _RankState(comm, construct, bool(is_built_on_rank()), what)
    payload = state.step_rank0(manifest)
    ready = True
    if comm.rank != 0 and state.built_here and is_ready is not None:
        ready = _probe(is_ready, payload, comm.rank, what)
    state.step_node_leaders(ready)
    state.step_rest()
    return state.result if state.built_here else None


def _probe(is_ready: Callable[[Any], bool], payload: Any, rank: int, what: str) -> bool:
    """``is_ready(payload)``; a probe that fails counts as "not visible" (never a hang)."""
    try:
        return bool(is_ready(payload))
    except Exception:  # noqa: BLE001 - the rank then builds its own cache
        logger.warning(
            "rank %d: checking the cache of %s failed; building it here", rank, what, exc_info=True
        )
        return False


class _RankState:
    """This rank's progress through the three exchanges of :func:`build_on_rank0_then_load`."""

    def __init__(
        self, comm: Communicator, construct: Callable[[], Any], built_here: bool, what: str
    ) -> None:
        self.comm = comm
        self.construct = construct
        self.built_here = built_here
        self.what = what
        self.result: Any = None
        self.constructed = False

    def _maybe_construct(self, wanted: bool, step: str, manifest=None) -> list[_Status]:
        status, error = _Status(self.comm.rank), None
        if wanted:

            def call():
                value = self.construct()
                return value, (manifest(value) if manifest is not None else None)

            pair, status, error = _run(call, self.comm.rank, self.what)
            if status.ok:
                self.result, payload = pair
                self.constructed = True
                status = _Status(self.comm.rank, payload=payload)
        return _exchange(self.comm, status, error, self.what, step)

    def step_rank0(self, manifest) -> Any:
        """Rank 0 builds; everyone learns the outcome and rank 0's cache manifest."""
        wanted = self.comm.rank == 0 and self.built_here
        return self._maybe_construct(wanted, "on rank 0", manifest)[0].payload

    def step_node_leaders(self, ready: bool) -> None:
        """On nodes that cannot see rank 0's cache, local rank 0 builds its own."""
        wanted = (
            self.built_here and not ready and not self.constructed and self.comm.local_rank == 0
        )
        if wanted:
            logger.info(
                "rank %d: the cache of %s is not visible here; building it on this node",
                self.comm.rank,
                self.what,
            )
        self._maybe_construct(wanted, "on a node's local rank 0")

    def step_rest(self) -> None:
        """Every remaining rank constructs, which now loads from a visible cache."""
        self._maybe_construct(self.built_here and not self.constructed, "while loading")
