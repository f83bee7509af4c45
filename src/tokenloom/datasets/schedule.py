"""``blend_schedule``: mixture weights that change with the global (train) sample index.

A schedule is ``[(start_sample, weights), ...]``: one weight per prefix of ``blend`` in
every phase, normalised. Phase 0 starts at sample 0; each next phase starts later. A
phase is constant (its weights hold until the next phase starts) unless it is given as
``(start_sample, weights, "linear")``: it then starts from the previous phase's weights
at ``start_sample`` and ramps linearly to its own, reached at the next phase's
``start_sample`` (so neither the first nor the last phase can be linear); the last phase
holds. The train split of ``blend`` follows the schedule (the greedy of
:mod:`tokenloom.index.schedule`, the sampling error carried across phases); valid and
test keep ``blend``'s own weights, which must therefore be given.

Everything ambiguous is a :class:`~tokenloom.errors.ConfigError` naming the phase and
the value. docs/mixtures.md explains the rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets import _checks as checks
from tokenloom.errors import ConfigError
from tokenloom.index.schedule import ScheduleArrays, schedule_arrays

__all__ = ["LINEAR", "Phase", "check_blend_schedule", "schedule_of", "to_arrays"]

LINEAR = "linear"
"""The third element of a phase that ramps from the previous phase's weights."""

Phase = tuple[Any, ...]
"""``(start_sample, weights)`` or ``(start_sample, weights, "linear")``."""


def check_blend_schedule(config: Any) -> Optional[list[Phase]]:
    """``config.blend_schedule`` validated and normalised (None when not given)."""
    given = config.blend_schedule
    if given is None:
        return None
    if config.blend is None:
        raise ConfigError(
            "blend_schedule needs blend (its weights are per prefix of blend; not with "
            "blend_per_split or mock data): give blend=(prefixes, weights) and split"
        )
    prefixes, blend_weights = config.blend
    if blend_weights is None:
        raise ConfigError(
            "blend_schedule sets the train split's weights; blend's weights set valid and "
            f"test's, so give them too: blend=({prefixes!r}, [one weight per prefix])"
        )
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
        raise ConfigError(
            f"blend_schedule={given!r}: expected a non-empty list of (start_sample, "
            "weights) or (start_sample, weights, 'linear') phases"
        )
    phases = [_check_phase(p, phase, len(prefixes)) for p, phase in enumerate(given)]
    _check_order(phases)
    never = [prefixes[i] for i in range(len(prefixes)) if all(ph[1][i] == 0 for ph in phases)]
    if never:
        raise ConfigError(
            f"blend_schedule gives {never[:5]} weight 0 in every phase: drop them from blend"
        )
    return phases


def _check_phase(p: int, phase: Any, count: int) -> Phase:
    if (
        isinstance(phase, (str, bytes))
        or not isinstance(phase, Sequence)
        or len(phase)
        not in (
            2,
            3,
        )
    ):
        raise ConfigError(
            f"blend_schedule[{p}]={phase!r}: a phase is (start_sample, weights) or "
            "(start_sample, weights, 'linear')"
        )
    start, weights = phase[0], phase[1]
    if not checks.is_int(start) or start < 0:
        raise ConfigError(f"blend_schedule[{p}]: start_sample={start!r} must be an integer >= 0")
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigError(f"blend_schedule[{p}]: weights={weights!r} must be a list of numbers")
    if len(weights) != count:
        raise ConfigError(
            f"blend_schedule[{p}]: {len(weights)} weights for the {count} prefixes of blend; "
            "give one weight per prefix, in blend's order (0 for a prefix not drawn)"
        )
    for w in weights:
        if not checks.is_real(w) or not checks.is_finite(float(w)) or w < 0:
            raise ConfigError(
                f"blend_schedule[{p}]: weight {w!r} in {list(weights)} must be a finite number >= 0"
            )
    total = math.fsum(float(w) for w in weights)
    if not total > 0 or not math.isfinite(total):
        raise ConfigError(
            f"blend_schedule[{p}]: weights {list(weights)} must have a finite sum > 0"
        )
    normalized = (numpy.asarray(weights, dtype=numpy.float64) / numpy.float64(total)).tolist()
    if len(phase) == 3:
        if phase[2] != LINEAR:
            raise ConfigError(
                f"blend_schedule[{p}]: kind {phase[2]!r} is not 'linear' (the only kind; "
                "leave it out for a constant phase)"
            )
        return (int(start), normalized, LINEAR)
    return (int(start), normalized)


def _check_order(phases: list[Phase]) -> None:
    if phases[0][0] != 0:
        raise ConfigError(
            f"blend_schedule[0]: start_sample={phases[0][0]}: the first phase starts at 0"
        )
    for p in range(1, len(phases)):
        if phases[p][0] <= phases[p - 1][0]:
            raise ConfigError(
                f"blend_schedule[{p}]: start_sample={phases[p][0]} must be greater than the "
                f"previous phase's ({phases[p - 1][0]})"
            )
    for p in (0, len(phases) - 1):
        if len(phases[p]) == 3:
            raise ConfigError(
                f"blend_schedule[{p}] is linear, but a ramp needs a phase before it (its "
                "starting weights) and one after it (where it ends): make it constant"
            )


def to_arrays(phases: Sequence[Phase]) -> ScheduleArrays:
    """The arrays :func:`tokenloom.index.schedule.build_scheduled_blending_indices` takes."""
    return schedule_arrays(
        [phase[0] for phase in phases],
        [phase[1] for phase in phases],
        [len(phase) == 3 for phase in phases],
    )


def schedule_of(config: Any, split_name: str) -> Optional[list[Phase]]:
    """The schedule the ``split_name`` blend follows: the config's for the train split,
    None otherwise (or when the config has none)."""
    if split_name != "train":
        return None
    schedule: Optional[list[Phase]] = read_attribute(config, "blend_schedule", None)
    return schedule
