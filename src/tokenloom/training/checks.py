"""The checks of the training side's arguments: one clear ConfigError per bad value.

Counts (sample counts, batch sizes, ranks, seeds) are integers (Python or numpy, never a
bool or a float, so ``NaN`` and ``2.0`` are refused) that fit in int64: a count of
``2**63`` or more cannot come from a real run and would overflow torch's int64 tensors
and generators. :func:`describe` writes any value into a message without ever failing
(a 10,000-digit int or a deeply nested list included).
"""

from __future__ import annotations

import math
import reprlib
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError

__all__ = [
    "INT64_MAX",
    "data_parallel_ranks",
    "describe",
    "flag",
    "integer",
    "is_integer",
    "optional_flag",
    "seconds",
    "check_total_samples",
]

INT64_MAX = 2**63 - 1


def describe(value: Any) -> str:
    """A short, bounded ``repr`` of ``value`` for an error message (never raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    bounded = reprlib.Repr()  # made per call: messages are rare, and nothing is shared
    bounded.maxstring, bounded.maxother, bounded.maxlevel = 80, 80, 3
    try:
        return bounded.repr(value)
    except Exception:  # noqa: BLE001 - a user object whose repr raises
        return f"<{type(value).__name__}>"


def is_integer(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy integer (not a bool)."""
    return isinstance(value, (int, numpy.integer)) and not isinstance(value, (bool, numpy.bool_))


def integer(name: str, value: Any, minimum: int, maximum: int = INT64_MAX) -> int:
    """``value`` as an int, or ConfigError unless it is an integer in
    ``[minimum, maximum]``."""
    if not is_integer(value):
        raise ConfigError(f"{name} must be an integer, got {describe(value)}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {describe(int(value))}")
    if value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {describe(int(value))}")
    return int(value)


def data_parallel_ranks(rank: Any, size: Any) -> tuple[int, int]:
    """``(data_parallel_rank, data_parallel_size)`` checked: a size >= 1 and a rank below it."""
    size = integer("data_parallel_size", size, 1)
    rank = integer("data_parallel_rank", rank, 0)
    if rank >= size:
        raise ConfigError(
            f"data_parallel_rank must be smaller than data_parallel_size: "
            f"got data_parallel_rank={rank}, data_parallel_size={size}"
        )
    return rank, size


def check_total_samples(total: Any) -> int:
    """A sampler's ``total_samples`` checked: an integer >= 1 (0: nothing to consume)."""
    count = integer("total_samples", total, 0)
    if count == 0:
        raise ConfigError(
            "total_samples is 0: the dataset has no sample to consume "
            "(check the split and num_samples)"
        )
    return count


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool, or ConfigError unless it is a bool (Python or numpy)."""
    if not isinstance(value, (bool, numpy.bool_)):
        raise ConfigError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


def optional_flag(name: str, value: Any) -> Optional[bool]:
    """None, or ``value`` checked by :func:`flag`."""
    return None if value is None else flag(name, value)


def seconds(name: str, value: Any, maximum: float) -> float:
    """``value`` as a float, or ConfigError unless it is a finite number of seconds in
    ``[0, maximum]`` (not a bool, not NaN)."""
    if isinstance(value, (bool, numpy.bool_)) or not isinstance(
        value, (int, float, numpy.integer, numpy.floating)
    ):
        raise ConfigError(f"{name} must be a number of seconds, got {describe(value)}")
    number = float(value) if not is_integer(value) or abs(value) <= INT64_MAX else math.inf
    if not math.isfinite(number) or number < 0 or number > maximum:
        raise ConfigError(
            f"{name} must be a finite number of seconds between 0 and {maximum:g}, "
            f"got {describe(value)}"
        )
    return number
