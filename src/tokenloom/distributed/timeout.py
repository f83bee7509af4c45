"""The one timeout of every distributed wait: ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S``.

It bounds every collective tokenloom issues: the dataset build's exchanges
(:mod:`tokenloom.distributed.rank0`) and the packing path's all-gathers, broadcasts
and all-to-alls (:mod:`tokenloom.packing`).  Default 1800 s; it must cover rank 0's
longest index build, which the other ranks wait for.
"""

from __future__ import annotations

import os
from typing import Any

from tokenloom.errors import DistributedError

ENV = "TOKENLOOM_DISTRIBUTED_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0
MAX_TIMEOUT_S = 1e9
"""About 31 years: no limit in practice, and still a valid ``datetime.timedelta``."""


def check_timeout(value: Any) -> float:
    """``value`` as seconds in (0, 1e9], else a :class:`DistributedError`."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(value, bool) or not 0 < seconds <= MAX_TIMEOUT_S:
        raise DistributedError(
            f"distributed timeout {value!r}: give a finite number of seconds > 0, at most "
            f"{MAX_TIMEOUT_S:g} ({ENV} or timeout_s=); the default is {DEFAULT_TIMEOUT_S:g}"
        )
    return seconds


def default_timeout_s() -> float:
    """``TOKENLOOM_DISTRIBUTED_TIMEOUT_S`` seconds, 1800 when unset or empty."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        return check_timeout(value)
    except DistributedError:
        raise DistributedError(
            f"{ENV}={value!r}: give a finite number of seconds > 0, at most "
            f"{MAX_TIMEOUT_S:g} (unset it for the default {DEFAULT_TIMEOUT_S:g})"
        ) from None


__all__ = ["DEFAULT_TIMEOUT_S", "ENV", "MAX_TIMEOUT_S", "check_timeout", "default_timeout_s"]
