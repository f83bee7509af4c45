"""Distributed builds: "rank 0 builds, the other ranks load", with bounded waits.

* :mod:`tokenloom.distributed.rank0`: :class:`Communicator` (the ranks of one job, as
  torch.distributed or the environment describes them), :func:`get_communicator` and
  :func:`build_on_rank0_then_load`, which runs a build on rank 0 (on each node's local
  rank 0 when cache folders are node-local), then lets the other ranks load, and raises a
  failure of any rank on every rank;
* :mod:`tokenloom.distributed.gather`: the all-gather every exchange of the build goes
  through;
* :mod:`tokenloom.distributed.collectives`: :func:`run_collective` and
  :func:`run_blocking`, which every collective of tokenloom (the build's and the
  packing path's) goes through: bounded by a timeout, ending in a
  :class:`~tokenloom.errors.DistributedError` that names the group, the step and the
  rank that did not answer (gloo: a roll call);
* :mod:`tokenloom.distributed.timeout`: the timeout, ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S``.

Every wait is bounded by ``Communicator.timeout_s`` (``TOKENLOOM_DISTRIBUTED_TIMEOUT_S``).
"""

from tokenloom.distributed.collectives import run_blocking, run_collective
from tokenloom.distributed.rank0 import (
    Communicator,
    build_on_rank0_then_load,
    default_timeout_s,
    get_communicator,
    is_distributed,
)

__all__ = [
    "Communicator",
    "build_on_rank0_then_load",
    "default_timeout_s",
    "get_communicator",
    "is_distributed",
    "run_blocking",
    "run_collective",
]
