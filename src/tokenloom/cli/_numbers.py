"""Range checks of the command line's numeric options (issue 18, class 8).

Every numeric option of every subcommand is either meaningful for 0, negative, NaN,
infinite and huge values (and its ``--help`` says what they mean) or refused here
with a :class:`~tokenloom.errors.ConfigError` naming the flag, the value and the valid
range (one line, exit 1).  argparse's ``type=int`` already refuses ``nan``/``inf``
and fractions for integer options; :func:`check_numbers` checks ranges, and for
``type=float`` options finiteness, before a subcommand does any work.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    """The valid values of one option: ``dest`` read from the parsed arguments (None,
    an option that was not given, is always fine), shown as ``flag`` in errors."""

    dest: str
    flag: str
    low: Optional[float] = None
    high: Optional[float] = None
    integer: bool = True
    low_open: bool = False
    """``low`` itself is refused (``> low`` rather than ``>= low``)."""
    allow_inf: bool = False
    """``+inf`` is meaningful (a float option; its ``--help`` says what it means)."""

    def range_text(self) -> str:
        """The valid range in words, e.g. ``an integer >= 1``."""
        kind = "an integer" if self.integer else "a number" if self.allow_inf else "a finite number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"<= {self.high:g}")
        return f"{kind} {' and '.join(parts)}".rstrip()

    def problem(self, value: Any) -> Optional[str]:
        """None when ``value`` is valid, else the one-line error."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            ok = False
        elif self.integer:
            ok = isinstance(value, numbers.Integral) and _within(self, value)
        else:
            infinite = self.allow_inf and value == math.inf
            ok = (_finite(value) or infinite) and _within(self, value)
        if ok:
            return None
        return f"{self.flag} {value!r}: must be {self.range_text()}"


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


def _within(bound: Bound, value: Any) -> bool:
    if bound.low is not None and (value <= bound.low if bound.low_open else value < bound.low):
        return False
    return bound.high is None or value <= bound.high


def check_numbers(source: Any, bounds: Iterable[Bound]) -> None:
    """ConfigError for the first value of ``source`` (a namespace or a mapping) that
    breaks its bound."""
    for bound in bounds:
        if isinstance(source, dict):
            value = source.get(bound.dest)
        else:
            value = read_attribute(source, bound.dest, None)
        problem = bound.problem(value)
        if problem:
            raise ConfigError(problem)


__all__ = ["Bound", "check_numbers"]
