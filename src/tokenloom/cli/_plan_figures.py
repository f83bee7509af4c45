"""The figures of ``tokenloom plan``: what every split and source of a config will give.

:func:`plan_splits` follows :class:`~tokenloom.builder.BlendedMegatronDatasetBuilder`'s
cases (one prefix, a weighted blend, an unweighted blend, per-split blends, multiple
validation sets) with the builder's own arithmetic, and builds nothing: each prefix's
``.idx`` is opened for its sequence lengths, the sizes come from
:func:`tokenloom.builder.sizes.blend_sizes`, the epochs from
:func:`tokenloom.datasets._gpt_indices.plan_epochs` (GPTDataset's rule), and the samples
each source gives from :func:`tokenloom.index.build_blending_indices` (the blend's own
greedy, run in memory; above :data:`EXACT_LIMIT` blended samples the counts are
``weight x size`` and marked approximate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.builder.sizes import blend_sizes
from tokenloom.datasets import _gpt_indices
from tokenloom.datasets.split import Split, normalize, split_document_range
from tokenloom.errors import ConfigError

__all__ = ["EXACT_LIMIT", "MidPlan", "SplitPlan", "plan_splits"]

EXACT_LIMIT = 1 << 24
"""Blends of more samples get approximate per-source counts (the exact greedy needs
10 bytes of memory per blended sample)."""
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1


@dataclass
class MidPlan:
    """One source of one split: a mid-level GPTDataset and what the blend draws from it."""

    source: str
    documents: int
    tokens: int
    num_samples: Optional[int]
    epochs: int = 0
    samples: int = 0
    drawn: int = 0
    weight: float = 1.0
    epoch_end_samples: list[int] = field(default_factory=list)
    """Samples that 1, 2, ... epochs hold; once planned, the (blended) sample index at
    which each of those that the split draws is served."""
    index_bytes: dict[str, int] = field(default_factory=dict)
    error: Optional[str] = None
    cap_sample: Optional[int] = None
    """The (blended) sample index at which the source passes its repetition cap
    (:func:`tokenloom.datasets.repetition.passing_count`, as the builder reports), or None."""
    shuffled: list[int] = field(default_factory=list)
    """Lengths of the arrays its build shuffles (``legacy_shuffle``): the document index
    and the shuffle index, each in two parts when the final epoch is separate (what
    :func:`tokenloom.index.dispatch.shuffle_route` decides on)."""


@dataclass
class SplitPlan:
    """One split: the samples asked and given, its sources, the blend's index bytes."""

    name: str
    asked: Optional[int]
    samples: int = 0
    blended: bool = False
    exact: bool = True
    sources: list[MidPlan] = field(default_factory=list)
    blend_bytes: dict[str, int] = field(default_factory=dict)
    empty_reason: Optional[str] = None


@dataclass
class _Caps:
    """The repetition cap of each source, and where a source passes it."""

    cap: Any
    seq: int
    extra: int

    def passing(self, mid: MidPlan, k: int) -> Optional[int]:
        """The source's sample (1-based count) that passes its cap, or None."""
        from tokenloom.datasets.repetition import cap_of, passing_count, repetitions

        if isinstance(self.cap, list) and k >= len(self.cap):
            return None  # the count mismatch is refused by plan's warnings
        limit = cap_of(self.cap, k)
        if not mid.tokens or repetitions(mid.drawn, mid.tokens, self.seq, self.extra) <= limit:
            return None
        return passing_count(limit, mid.tokens, self.seq, self.extra)


def _mid(config: Any, prefix: str, bounds: Any, size: Optional[int], split: Split) -> MidPlan:
    """Open ``prefix``'s .idx and size its GPTDataset of ``split`` as GPTDataset does."""
    from tokenloom.datasets import GPTDataset

    low = GPTDataset.build_low_level_dataset(prefix, config)
    lengths = numpy.asarray(low.sequence_lengths)
    begin, end = split_document_range(bounds, GPTDataset.numel_low_level_dataset(low))
    indices = numpy.arange(begin, end, 1, dtype=numpy.int32)
    tokens = int(lengths[indices].sum(dtype=numpy.int64)) if indices.size else 0
    mid = MidPlan(prefix, int(indices.size), tokens, size)
    seq, extra = int(config.sequence_length), int(config.add_extra_token_to_sequence)
    drop_last = True
    if split == Split.valid:
        drop_last = bool(config.drop_last_partial_validation_sequence)
    where = f"GPTDataset {split.name} split of {prefix} (documents [{begin}, {end}))"
    try:
        epochs = _gpt_indices.plan_epochs(lengths, indices, size, seq, extra, drop_last, where)
    except ConfigError as error:
        mid.error = str(error)
        return mid
    mid.epochs = epochs.num_epochs
    mid.samples = epochs.total_samples(seq, extra)
    mid.epoch_end_samples = [
        _gpt_indices.count_samples(e * tokens, seq, extra, True)
        for e in range(1, epochs.num_epochs + 1)
    ]
    mid.shuffled = _shuffled(epochs, mid, str(read_attribute(config, "shuffle_mode", "exact")))
    largest = max(mid.epochs * mid.documents, int(lengths.max()) if lengths.size else 0)
    mid.index_bytes = {
        "document_index": 4 * mid.epochs * mid.documents,
        "sample_index": 2 * (mid.samples + 1) * (4 if largest <= _INT32_MAX else 8),
        "shuffle_index": mid.samples * (4 if mid.samples < _UINT32_MAX - 1 else 8),
    }
    return mid


def _shuffled(epochs: Any, mid: MidPlan, shuffle_mode: str) -> list[int]:
    """``MidPlan.shuffled`` (``_gpt_indices.build_indices``' shuffles; a bijection
    shuffle index is a parameter table, not shuffled)."""
    parts = [mid.epochs * mid.documents]
    samples = [mid.samples]
    if epochs.separate_final_epoch:
        parts = [(mid.epochs - 1) * mid.documents, mid.documents]
        first = epochs.num_samples_sans_final_epoch
        samples = [first, mid.samples - first]
    return parts + (samples if shuffle_mode != "bijection" else [])


def _counts(weights: list[float], size: int) -> tuple[numpy.ndarray, Optional[numpy.ndarray]]:
    """Samples drawn from each dataset, and the blend's dataset_index (None: approximate)."""
    from tokenloom.index import build_blending_indices

    if size <= EXACT_LIMIT:
        dataset_index, _ = build_blending_indices(numpy.asarray(weights, numpy.float64), size)
        return numpy.bincount(dataset_index, minlength=len(weights)), dataset_index
    counts = numpy.floor(numpy.asarray(weights) * size).astype(numpy.int64)
    counts[: size - int(counts.sum())] += 1
    return counts, None


def _blend(
    plan: SplitPlan, weights: Optional[list[float]], size: Optional[int], caps: _Caps
) -> None:
    """Fill in the blend of ``plan.sources`` as BlendedDataset draws it."""
    from tokenloom.index import build_exhaustive_blending_indices

    mids = plan.sources
    plan.blended = True
    if any(mid.error for mid in mids):
        return
    dataset_index: Optional[numpy.ndarray]
    if weights is None:  # unweighted: blended by the sources' lengths
        lengths = [mid.samples for mid in mids]
        size = None if size is None else min(size, sum(lengths))
        if size is None:
            dataset_index, _ = build_exhaustive_blending_indices(numpy.asarray(lengths))
            counts = numpy.asarray(lengths)
        else:
            counts, dataset_index = _counts(normalize(lengths), size)
        weights = normalize(lengths)
    else:
        weights = normalize(weights)  # BlendedDataset normalises again, as megatron-core
        counts, dataset_index = _counts(weights, int(size or 0))
    plan.samples, plan.exact = int(sum(counts)), dataset_index is not None
    plan.blend_bytes = {"dataset_index": 2 * plan.samples, "dataset_sample_index": 8 * plan.samples}
    for k, mid in enumerate(mids):
        mid.drawn, mid.weight = int(counts[k]), float(weights[k])
        ends = [n for n in mid.epoch_end_samples if 0 < n <= mid.drawn]
        passing = caps.passing(mid, k)
        if dataset_index is None:
            mid.epoch_end_samples = [int(n / weights[k]) - 1 for n in ends]
            mid.cap_sample = None if passing is None else int(passing / weights[k]) - 1
        else:
            positions = numpy.flatnonzero(dataset_index == k)
            mid.epoch_end_samples = [int(positions[n - 1]) for n in ends]
            mid.cap_sample = None if passing is None else int(positions[passing - 1])


def _single(plan: SplitPlan, mid: MidPlan, caps: _Caps) -> SplitPlan:
    plan.sources = [mid]
    mid.drawn = plan.samples = mid.samples
    passing = caps.passing(mid, 0)
    mid.cap_sample = None if passing is None else passing - 1
    mid.epoch_end_samples = [n - 1 for n in mid.epoch_end_samples if 0 < n <= mid.samples]
    return plan


def _from_blend(
    config: Any,
    plan: SplitPlan,
    blend: tuple[list[str], Optional[list[float]]],
    bounds: Any,
    sizes: list[Optional[int]],
    i: int,
    caps: _Caps,
) -> SplitPlan:
    prefixes, weights = blend
    split = Split(i)
    if len(prefixes) == 1 and weights is None:
        return _single(plan, _mid(config, prefixes[0], bounds, sizes[i], split), caps)
    surplus = float(config.mid_level_dataset_surplus)
    normalized, target, buffer = blend_sizes(weights, sizes, surplus, len(prefixes))
    plan.sources = [
        _mid(config, prefix, bounds, buffer[k][i], split) for k, prefix in enumerate(prefixes)
    ]
    if normalized is None or target is None:
        _blend(plan, None, plan.asked, caps)
    else:
        _blend(plan, normalized, sum(row[i] for row in target), caps)
    return plan


def _validation_sets(config: Any, plan: SplitPlan, prefixes: list[str]) -> SplitPlan:
    """Multiple validation sets: one full dataset per prefix, no blend."""
    for prefix in prefixes:
        mid = _mid(config, prefix, (0.0, 1.0), plan.asked, Split.valid)
        mid.drawn = mid.samples
        plan.sources.append(mid)
    plan.samples = sum(mid.samples for mid in plan.sources)
    return plan


def plan_splits(config: Any, sizes: list[Optional[int]], cap: Any = None) -> list[SplitPlan]:
    """What each split (train, valid, test) of ``config`` gives for the builder's ``sizes``
    (``cap``: the repetition cap, a number or one per source, for ``cap_sample``)."""
    caps = _Caps(cap, int(config.sequence_length), int(config.add_extra_token_to_sequence))
    plans = []
    for split in Split:
        i = split.value
        plan = SplitPlan(split.name, sizes[i])
        if config.blend_per_split is None:
            bounds = config.split_matrix[i]
            if bounds is None:
                plan.empty_reason = f"split {config.split!r} gives it no documents"
            else:
                plan = _from_blend(config, plan, config.blend, bounds, sizes, i, caps)
        else:
            blend = config.blend_per_split[i]
            spoof: list[Optional[int]] = [0] * len(Split)
            spoof[i] = sizes[i]
            if blend is None:
                plan.empty_reason = "blend_per_split names no data for it"
            elif split == Split.valid and config.multiple_validation_sets and len(blend[0]) > 1:
                plan = _validation_sets(config, plan, list(blend[0]))
            else:
                plan = _from_blend(config, plan, blend, (0.0, 1.0), spoof, i, caps)
        plans.append(plan)
    return plans
