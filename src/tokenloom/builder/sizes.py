"""The builder's arithmetic and argument checks: samples per split and per dataset.

* :func:`get_size_per_split_per_dataset`: megatron-core's sizes of the mid-level
  datasets of a weighted blend; :func:`blend_sizes`: those sizes for one blend, with
  and without the surplus;
* :func:`apply_schedule`: those sizes for the train split of a ``blend_schedule``;
* :func:`check_sizes`: the ``sizes`` argument (one per split, ``None`` or an integer >= 0);
  :func:`check_sizes_against_weights`: every weighted blend has a size to blend to;
* :func:`check_built_length`: a built dataset has the samples its size asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.datasets.schedule import to_arrays
from tokenloom.datasets.split import Split, normalize, split_document_range
from tokenloom.errors import CacheError, ConfigError
from tokenloom.index.schedule import scheduled_targets

__all__ = [
    "BlendSizes",
    "apply_schedule",
    "schedule_counts",
    "blend_sizes",
    "check_built_length",
    "check_sizes",
    "check_sizes_against_weights",
    "get_size_per_split_per_dataset",
    "sizes_reference",
    "split_indices",
]

BlendSizes = tuple[Optional[list[float]], Optional[list[list[int]]], list[list[Optional[int]]]]
"""``(weights, target, buffer)`` of :func:`blend_sizes`."""


def get_size_per_split_per_dataset(
    normalized_weights: Sequence[float], target_size_per_split: Sequence[int], surplus: float = 0.0
) -> list[list[int]]:
    """Samples to request from each dataset for each split (megatron-core's arithmetic).

    ``[[ceil(ceil(size * weight) * (1 + surplus)) for size in sizes] for weight in weights]``
    """
    if not numpy.isclose(sum(normalized_weights), 1.0):
        raise ConfigError(f"weights {list(normalized_weights)} must be normalised to sum to 1")
    fast = _sizes_by_arrays(normalized_weights, target_size_per_split, surplus)
    if fast is not None:
        return fast
    return sizes_reference(normalized_weights, target_size_per_split, surplus)


def sizes_reference(
    weights: Sequence[float], sizes: Sequence[int], surplus: float
) -> list[list[int]]:
    """:func:`get_size_per_split_per_dataset`'s arithmetic, one Python float at a time."""
    return [
        [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for size in sizes] for w in weights
    ]


def _sizes_by_arrays(
    weights: Sequence[float], sizes: Sequence[int], surplus: float
) -> Optional[list[list[int]]]:
    """:func:`sizes_reference` over arrays (thousands of prefixes: one pass, not 2x3
    ``ceil`` calls a prefix); None where it could differ: weights not all floats, sizes
    or results not exact in float64 (numpy's float64 products and ``ceil`` are Python's
    float ones, and an int below 2**53 converts exactly)."""
    if (
        len(weights) < 64
        or not sizes
        or type(surplus) not in (int, float)
        or not all(type(w) is float for w in weights)
    ):
        return None
    if not all(type(n) is int and 0 <= n < 2.0**53 for n in sizes):
        return None
    products = numpy.ceil(numpy.multiply.outer(numpy.asarray(weights), numpy.asarray(sizes, float)))
    result = numpy.ceil(products * (1 + surplus))
    if not bool(numpy.isfinite(result).all()) or float(numpy.abs(result).max()) >= 2.0**53:
        return None
    rows: list[list[int]] = result.astype(numpy.int64).tolist()
    return rows


def blend_sizes(
    weights: Optional[Sequence[float]],
    sizes: Sequence[Optional[int]],
    surplus: float,
    count: int,
) -> BlendSizes:
    """For a blend of ``count`` prefixes: the normalized ``weights``, the samples each
    prefix gives each split (``target[prefix][split]``) and the sizes its mid-level
    datasets are built with (``buffer``, the same plus ``surplus``). Without weights:
    None, None and one epoch (None) of every prefix for every split."""
    if weights is None:
        return None, None, [[None] * len(Split) for _ in range(count)]
    normalized = normalize(weights)
    zeros = [size or 0 for size in sizes]  # None only where no weight asks for samples
    target = get_size_per_split_per_dataset(normalized, zeros)
    buffer: list[list[Optional[int]]] = [
        list(row) for row in get_size_per_split_per_dataset(normalized, zeros, surplus=surplus)
    ]
    return normalized, target, buffer


def schedule_counts(schedule: Sequence[Any], size: int) -> list[int]:
    """Samples the train blend of ``size`` asks of each prefix under a ``blend_schedule``:
    ``ceil`` of the cumulative scheduled target at ``size`` (for one phase, megatron-core's
    ``ceil(size * weight)``)."""
    if size == 0:
        return [0] * len(schedule[0][1])
    targets = scheduled_targets(to_arrays(schedule), size)
    return [int(math.ceil(target)) for target in targets.tolist()]


def apply_schedule(
    config: Any, sizes: Sequence[Optional[int]], surplus: float, result: BlendSizes
) -> BlendSizes:
    """:func:`blend_sizes`'s ``result`` with the train column from the config's
    ``blend_schedule`` (unchanged without one): the schedule's counts, and those plus
    Megatron's ``surplus`` for the mid-level datasets."""
    schedule = read_attribute(config, "blend_schedule", None)
    weights, target, buffer = result
    train = Split.train.value
    if schedule is None or target is None or sizes[train] is None:
        return result
    for prefix, count in enumerate(schedule_counts(schedule, int(sizes[train] or 0))):
        target[prefix][train] = count
        buffer[prefix][train] = int(math.ceil(count * (1 + surplus)))
    return weights, target, buffer


def check_sizes_against_weights(config: Any, sizes: Sequence[Optional[int]]) -> None:
    """ConfigError naming the split whose blend has weights but whose size is None."""
    for split in Split:
        if config.blend_per_split is None:
            blend = config.blend
        else:
            blend = config.blend_per_split[split.value]
            if blend is None:
                continue
        if sizes[split.value] is None and blend[1] is not None:
            raise ConfigError(
                f"the {split.name} split has blend weights {blend[1]} but no size: weights "
                f"need a number of samples to blend to. Give sizes[{split.value}] or drop the "
                f"weights (this happens with multiple validation sets whose blend has weights)"
            )


def check_built_length(dataset: Any, path_to_cache: Optional[str]) -> None:
    """CacheError when a built ``dataset`` has fewer samples than were requested (a
    blend: other than its size): its cached indices do not match the config."""
    if dataset is None or len(dataset) == 0:
        return
    if isinstance(dataset, BlendedDataset):
        wrong = dataset.size is not None and len(dataset) != dataset.size
        expected = dataset.size
    else:
        expected = read_attribute(dataset, "num_samples", None)
        wrong = expected is not None and len(dataset) < expected
    if wrong:
        raise CacheError(
            f"{type(dataset).__name__} {read_attribute(dataset, 'dataset_path', '') or ''} has "
            f"{len(dataset)} samples but {expected} were requested; its cached indices do "
            f"not match the config: delete them from {path_to_cache} and rebuild"
        )


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


def split_indices(
    bounds: tuple[float, float], num_elements: int, fast_cache_load: bool
) -> tuple[Optional[numpy.ndarray], bool]:
    """The document ids of the split ``bounds`` of ``num_elements`` (``arange`` of its
    range; None under ``fast_cache_load``, as megatron-core skips them), and whether
    that range lies within ``[0, num_elements)`` (its ends bound the ``arange``)."""
    if fast_cache_load:
        return None, False
    begin, end = split_document_range(bounds, num_elements)
    indices = numpy.arange(begin, end, 1, dtype=numpy.int32)
    return indices, 0 <= begin and end <= min(num_elements, 1 << 31)
