"""The builder's arithmetic and argument checks: samples per split and per dataset.

* :func:`get_size_per_split_per_dataset`: megatron-core's sizes of the mid-level
  datasets of a weighted blend;
* :func:`check_sizes`: the ``sizes`` argument (one per split, ``None`` or an integer >= 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.datasets.split import Split
from tokenloom.errors import ConfigError

__all__ = ["check_sizes", "get_size_per_split_per_dataset"]


def get_size_per_split_per_dataset(
    normalized_weights: Sequence[float], target_size_per_split: Sequence[int], surplus: float = 0.0
) -> list[list[int]]:
    """Samples to request from each dataset for each split (megatron-core's arithmetic).

    ``[[ceil(ceil(size * weight) * (1 + surplus)) for size in sizes] for weight in weights]``
    """
    if not numpy.isclose(sum(normalized_weights), 1.0):
        raise ConfigError(f"weights {list(normalized_weights)} must be normalised to sum to 1")
    return [
        [int(math.ceil(math.ceil(size * weight) * (1 + surplus))) for size in target_size_per_split]
        for weight in normalized_weights
    ]


def check_sizes(sizes: Any) -> list[Optional[int]]:
    """``sizes`` as a list of one ``int`` or ``None`` per split (ConfigError otherwise)."""
    if (
        isinstance(sizes, (str, bytes))
        or not isinstance(sizes, Sequence)
        or len(sizes) != len(Split)
    ):
        raise ConfigError(
            f"sizes={sizes!r}: give one size per split (train, valid, test), each an integer "
            f">= 0 or None, e.g. [1000, 100, None]"
        )
    for split, size in zip(Split, sizes):
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, (int, numpy.integer)) or size < 0
        ):
            raise ConfigError(f"sizes[{split.name}]={size!r}: must be None or an integer >= 0")
    return [None if size is None else int(size) for size in sizes]
