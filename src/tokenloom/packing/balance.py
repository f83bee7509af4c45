"""Modelled step time of each DP x CP rank under a schedule, and the imbalance max/mean.

A schedule is ``[microbatch][rank] -> ids`` (the output of every scheduler here).  In
each microbatch, a sequence listed by ``k`` ranks costs each of them
``(token_cost * L + attention_cost * L**2) / k``; a rank's time is the sum over the
microbatches.  ``imbalance`` is ``max / mean`` of those times (1.0 is perfect).
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from tokenloom.errors import ConfigError, PackingError


def check_costs(token_cost: Any, attention_cost: Any) -> tuple[float, float]:
    """``(token_cost, attention_cost)`` as floats: finite, >= 0 and not both 0."""
    values = []
    for name, value in (("token_cost", token_cost), ("attention_cost", attention_cost)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{name} {value!r} must be a number >= 0")
        values.append(float(value))
    if not all(math.isfinite(v) and v >= 0 for v in values) or sum(values) <= 0:
        raise ConfigError(
            f"token_cost {token_cost!r} and attention_cost {attention_cost!r} must be "
            "finite, >= 0 and not both 0"
        )
    return values[0], values[1]


def rank_times(
    schedule: Sequence[Sequence[Sequence[Hashable]]],
    lengths: Mapping[Any, int],
    token_cost: float = 1.0,
    attention_cost: float = 1.0 / 4096,
) -> list[float]:
    """Modelled time of every rank; ``lengths`` maps an id to its token count."""
    token_cost, attention_cost = check_costs(token_cost, attention_cost)
    if not schedule:
        return []
    ranks = len(schedule[0])
    times = [0.0] * ranks
    for index, microbatch in enumerate(schedule):
        if len(microbatch) != ranks:
            raise PackingError(
                f"microbatch {index} has {len(microbatch)} ranks, microbatch 0 has {ranks}"
            )
        sharers = Counter(i for ids in microbatch for i in ids)
        for rank, ids in enumerate(microbatch):
            for i in ids:
                n = float(lengths[i])
                times[rank] += (token_cost * n + attention_cost * n * n) / sharers[i]
    return times


def imbalance(times: Sequence[float]) -> float:
    """``max / mean`` of the rank times (1.0 when perfectly balanced)."""
    if not times or sum(times) == 0:
        return 1.0
    return max(times) * len(times) / sum(times)
