"""Train/valid/test splits: the ``Split`` enum, split strings and the split matrix.

A split string such as ``"98,2,0"`` weights the three splits. It is normalised to a
vector of fractions (``[0.98, 0.02, 0.0]``) and turned into a *split matrix*: for
each split either ``None`` (empty) or the ``(begin, end)`` fractions of the
low-level dataset it covers. The builder turns a matrix row into the document
range ``[round(begin * n), round(end * n))`` of a dataset with ``n`` elements.

The arithmetic (float accumulation order, rounding) is exactly megatron-core
0.16.1's, so the same split string selects the same documents.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from enum import Enum
from typing import Optional

from tokenloom.errors import ConfigError

__all__ = [
    "SPLITS",
    "Split",
    "normalize",
    "parse_and_normalize_split",
    "convert_split_vector_to_split_matrix",
    "split_document_range",
]


class Split(Enum):
    """The three dataset splits, valued by their position in sizes/blends lists."""

    train = 0
    valid = 1
    test = 2


SPLITS = tuple(Split)
"""The splits in order (iterating ``Split`` itself runs a generator each time)."""

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
# megatron-core reads every run of [.0-9] as a number, so any other character separates;
# the separators people use (and Megatron's docs show) are accepted, signs and letters
# (which megatron-core would silently misread: "-1" as 1) are not.
_SPLIT_GRAMMAR = re.compile(rf"^\s*{_NUMBER}(?:\s*[,/;:_\s]\s*{_NUMBER})*\s*$")


def normalize(weights: Sequence[float]) -> list[float]:
    """Divide ``weights`` by their sum (float64 arithmetic, as megatron-core)."""
    import numpy

    array = numpy.array(weights, dtype=numpy.float64)
    with numpy.errstate(over="ignore"):
        total = numpy.sum(array)
    if not numpy.isfinite(total) or total <= 0.0:
        raise ConfigError(
            f"weights {list(weights)} sum to {float(total)}; they must be finite, non-negative "
            "and sum to a finite positive number: scale them down (only their ratios matter)"
        )
    normalized: list[float] = (array / total).tolist()
    return normalized


def parse_and_normalize_split(split: str) -> list[float]:
    """Parse a split string (``"99,1,0"``) into three normalised fractions.

    Fewer than three numbers are padded with zeros (``"99,1"`` -> ``[0.99, 0.01, 0.0]``).
    Raises :class:`ConfigError` for anything megatron-core would misread or reject:
    signs, letters, more than three numbers, or all-zero weights.
    """
    if not isinstance(split, str):
        raise ConfigError(
            f"split={split!r}: expected a string of up to {len(Split)} comma separated "
            "non-negative weights such as '98,2,0'"
        )
    if not _SPLIT_GRAMMAR.match(split):
        raise ConfigError(
            f"split={split!r} is not a list of non-negative numbers; write the train, "
            "valid and test weights separated by commas, e.g. '98,2,0'"
        )
    values = [float(token) for token in re.findall(_NUMBER, split)]
    if len(values) > len(Split):
        raise ConfigError(
            f"split={split!r} has {len(values)} weights but there are only "
            f"{len(Split)} splits (train, valid, test); give at most {len(Split)}"
        )
    values += [0.0] * (len(Split) - len(values))
    if not math.isfinite(sum(values)):
        raise ConfigError(
            f"split={split!r}: the weights are too large to add up as floats; "
            "only their ratios matter, write e.g. '98,2,0'"
        )
    if sum(values) <= 0.0:
        raise ConfigError(
            f"split={split!r}: the weights sum to zero, so no split receives any "
            "document; give at least one positive weight, e.g. '98,2,0'"
        )
    return normalize(values)


def _cumulative(vector: Sequence[float]) -> list[float]:
    """``[a, b, c] -> [0, a, a+b, a+b+c]`` accumulated left to right (megatron's order)."""
    expansion: list[float] = [0]
    for value in vector:
        expansion.append(expansion[-1] + value)
    return expansion


def convert_split_vector_to_split_matrix(
    vector_a: Sequence[float], vector_b: Optional[Sequence[float]] = None
) -> list[Optional[tuple[float, float]]]:
    """Turn one (or the overlap of two) split vectors into per-split bookends.

    ``[0.99, 0.01, 0.0] -> [(0, 0.99), (0.99, 1.0), None]``. With ``vector_b`` each row
    is the intersection of the two vectors' bookends, or ``None`` where they do not
    overlap.
    """
    if vector_b is None:
        vector_b = vector_a
    if len(vector_a) != len(vector_b):
        raise ConfigError(
            f"split vectors {list(vector_a)} and {list(vector_b)} differ in length; "
            "give one weight per split for both"
        )
    expansion_a = _cumulative(vector_a)
    expansion_b = _cumulative(vector_b)
    matrix: list[Optional[tuple[float, float]]] = []
    for i in range(len(vector_a)):
        begin = max(expansion_a[i], expansion_b[i])
        end = min(expansion_a[i + 1], expansion_b[i + 1])
        matrix.append(None if end <= begin else (begin, end))
    return matrix


def split_document_range(bookends: tuple[float, float], num_elements: int) -> tuple[int, int]:
    """The ``[begin, end)`` element range a split-matrix row selects, as the builder does."""
    begin = int(round(bookends[0] * float(num_elements)))
    end = int(round(bookends[1] * float(num_elements)))
    return begin, end
