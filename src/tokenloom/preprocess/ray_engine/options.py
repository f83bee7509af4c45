"""The numeric options of the Ray engine, checked before any cluster is touched.

| option | accepted | meaning of the edges |
| --- | --- | --- |
| ``num_shards`` (``--num-shards``) | None, or an int in 1..99999 | None: the default plan; more than 99,999 shards do not fit the shard names |
| ``max_retries`` (``--max-retries``) | an int in 0..100 | 0: a lost shard fails the run; Ray's -1 (retry forever) is refused, as is more than 100 |
| ``num_cpus`` (private cluster) | None, or an int in 1..65536 | None: all of this machine's CPUs; more than it has oversubscribes it (Ray's logical CPUs) |
| ``workers`` (``--workers``, CPUs per task) | an int >= 1 | a task that needs more CPUs than the largest live node has is refused once connected (it would never be scheduled) |
| ``connect_timeout_s`` (``--connect-timeout``) | seconds in (0, 86400] | see :mod:`.connect` |

Anything else (0, negatives, NaN, floats, bools) is a :class:`ConfigError` naming the
option and the value.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

from tokenloom.errors import ConfigError

MAX_SHARDS = 99999
"""Shard names carry five digits (``shard-00003-of-00008``)."""
MAX_RETRIES = 100
MAX_NUM_CPUS = 65536


def _whole(value: Any, flag: str, low: int, high: Optional[int], why: str = "") -> int:
    number = int(value) if isinstance(value, numbers.Integral) else None
    if (
        isinstance(value, bool)
        or number is None
        or number < low
        or (high is not None and number > high)
    ):
        span = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise ConfigError(f"{flag} {value!r}: use a whole number {span}{why}")
    return number


def check_num_shards(value: Any) -> Optional[int]:
    """None (the default plan) or the target number of shards, 1..99999."""
    if value is None:
        return None
    return _whole(value, "--num-shards", 1, MAX_SHARDS, " (shard names have five digits)")


def check_max_retries(value: Any) -> int:
    """Retries of a lost shard, 0..100."""
    return _whole(value, "--max-retries", 0, MAX_RETRIES)


def check_num_cpus(value: Any) -> Optional[int]:
    """None (all CPUs) or the private cluster's logical CPUs, 1..65536."""
    if value is None:
        return None
    return _whole(value, "num_cpus", 1, MAX_NUM_CPUS)


def check_workers(value: Any) -> int:
    """CPUs (and tokenising processes) of each shard task, 1 or more."""
    return _whole(value, "--workers", 1, None)


def check_task_fits(cpus_per_task: int, largest_node_cpus: int) -> None:
    """A ConfigError when no live node offers ``cpus_per_task`` CPUs (never scheduled)."""
    if cpus_per_task > largest_node_cpus:
        raise ConfigError(
            f"--workers {cpus_per_task}: each shard task needs {cpus_per_task} CPUs, but the "
            f"largest live node of the cluster has {largest_node_cpus}, so no task could ever "
            "start; lower --workers (or add such a node first, on an autoscaling cluster)"
        )


__all__ = [
    "MAX_NUM_CPUS",
    "MAX_RETRIES",
    "MAX_SHARDS",
    "check_max_retries",
    "check_num_cpus",
    "check_num_shards",
    "check_task_fits",
    "check_workers",
]
