"""The blend a loader serves after a mixture change, and the sources' saved orders.

:class:`ContinuedBlend` is a :class:`~tokenloom.datasets.BlendedDataset` (same
``get_batch``, ``dataset_id``, attribution and block-list support) whose indices from the
resume point ``resume_at`` on are the new weights' greedy blend (megatron-core's rule) as
if it had started there, with each source continuing its stream: blended sample
``resume_at + t`` is sample ``(start[s] + r) % len(datasets[s])`` of source ``s`` when the
new blend gives ``t`` to ``s`` as its ``r``-th draw. ``datasets[s]`` is the dataset the
source was drawn from in the saved run (its order: a GPTDataset's order depends on its
``num_samples`` and split), rebuilt by :func:`rebuild_source` from its
:func:`order_of` record; an added source's is its new dataset. A stream that runs past
its dataset starts that dataset over (a further round in the same order: every sample of
a round is served once before any is served again). The positions before ``resume_at``
are never served by the loader (they hold source 0, sample 0).

With a ``blend_schedule``, the phase in force at ``resume_at`` holds from there and the later
phases start where the schedule puts them; inside a linear ramp the ramp goes on from its
weights at ``resume_at`` (:func:`tail_schedule`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.datasets.schedule import to_arrays
from tokenloom.datasets.split import split_document_range
from tokenloom.errors import ConfigError
from tokenloom.index import build_blending_indices
from tokenloom.index.schedule import build_scheduled_blending_indices

__all__ = [
    "ContinuedBlend",
    "order_of",
    "ramp_weights",
    "rebuild_source",
    "tail_indices",
    "tail_schedule",
]


def _documents(dataset: Any) -> Optional[list[int]]:
    """``[first, end)`` of the documents a GPT-like dataset exposes (a contiguous range,
    as the builder cuts splits), or None when they are not one."""
    indices = read_attribute(dataset, "indices", None)
    if indices is None:  # fast_cache_load: the split's range, as the builder computes it
        config, split = read_attribute(dataset, "config", None), dataset.index_split
        matrix = read_attribute(config, "split_matrix", None)
        bounds = None if matrix is None else matrix[split.value]
        if bounds is None or read_attribute(dataset, "dataset", None) is None:
            return None
        return list(
            split_document_range(bounds, type(dataset).numel_low_level_dataset(dataset.dataset))
        )
    indices = numpy.asarray(indices)
    if not len(indices):
        return [0, 0]
    first, end = int(indices[0]), int(indices[-1]) + 1
    if end - first != len(indices) or not numpy.array_equal(indices, numpy.arange(first, end)):
        return None
    return [first, end]


def order_of(dataset: Any) -> dict[str, Any]:
    """What rebuilds ``dataset``'s order: class, length, ``num_samples``, document range,
    the config's ``split``, megatron-core's description hash and the path prefix that
    description names (None where unknown)."""
    config = read_attribute(dataset, "config", None)
    split = read_attribute(config, "split", None)
    digest = read_attribute(dataset, "unique_description_hash", None)
    has_indices = read_attribute(dataset, "index_split", None) is not None
    described = read_attribute(dataset, "unique_identifiers", None) or {}
    path = described.get("dataset_path") if isinstance(described, Mapping) else None
    return {
        "class": type(dataset).__name__,
        "length": len(dataset),
        "num_samples": read_attribute(dataset, "num_samples", None),
        "documents": _documents(dataset) if has_indices else None,
        "split": split if isinstance(split, str) else None,
        "description_hash": None if digest is None else str(digest),
        "path": path if isinstance(path, str) else None,
    }


def rebuild_source(current: Any, order: Mapping[str, Any], name: str) -> Any:
    """The dataset of ``order`` over ``current``'s files and config (``current`` itself
    when it already is that one), from the index cache or rebuilt; ConfigError when the
    order cannot be rebuilt or the rebuilt one is not it."""
    if order_of(current)["description_hash"] == order["description_hash"] is not None:
        if len(current) == order["length"]:
            return current
    if order["documents"] is None or order["description_hash"] is None:
        raise ConfigError(
            f"source {name!r}: its saved order ({order['class']}) cannot be rebuilt: only a "
            "GPT-like dataset over a contiguous document range (a builder's split) can continue"
        )
    config = current.config
    if order["split"] is not None and order["split"] != config.split:
        config = dataclasses.replace(config, split=order["split"])
    documents = numpy.arange(*order["documents"], dtype=numpy.int32)
    keywords = (
        {} if read_attribute(current, "cache", None) is None else {"index_cache": current.cache}
    )
    described = order.get("path") or current.dataset_path  # a moved pair: the saved path
    old = type(current)(
        current.dataset,
        described,
        documents,
        order["num_samples"],
        current.index_split,
        config,
        **keywords,
    )
    if old.unique_description_hash != order["description_hash"] or len(old) != order["length"]:
        raise ConfigError(
            f"source {name!r}: rebuilt from this config, its saved order has description hash "
            f"{old.unique_description_hash} and {len(old)} samples, the state records "
            f"{order['description_hash']} and {order['length']}: a setting that shapes its "
            "order (random_seed, sequence_length, tokenizer, shuffle_mode, ...) changed"
        )
    # its description (and cache entry) names the saved path; what reads it by prefix
    # (block lists, attribution) names the path it is read from now
    old.dataset_path = current.dataset_path
    return old


def ramp_weights(schedule: Sequence[Sequence[Any]], p: int, sample: int) -> list[float]:
    """The weights of the linear phase ``p`` at ``sample`` (its ramp, interpolated in
    float64 and normalised)."""
    begin, end = schedule[p][0], schedule[p + 1][0]
    before = numpy.asarray(schedule[p - 1][1], numpy.float64)
    after = numpy.asarray(schedule[p][1], numpy.float64)
    weights = before + (after - before) * ((sample - begin) / (end - begin))
    return [float(w) for w in weights / weights.sum()]


def tail_schedule(schedule: Sequence[Sequence[Any]], resume_at: int) -> list[tuple[Any, ...]]:
    """The schedule as if started at ``resume_at``: the phase in force there from 0, the
    later ones shifted. Inside a linear ramp, phase 0 holds the ramp's weights at
    ``resume_at`` for one sample and a linear phase from sample 1 reaches the ramp's own
    weights where the schedule reaches them (docs/mixtures.md)."""
    active = max(p for p, phase in enumerate(schedule) if phase[0] <= resume_at)
    later = [(phase[0] - resume_at, *phase[1:]) for phase in schedule[active + 1 :]]
    if len(schedule[active]) != 3:
        return [(0, list(schedule[active][1])), *later]
    head: list[tuple[Any, ...]] = [(0, ramp_weights(schedule, active, resume_at))]
    if later[0][0] > 1:  # some of the ramp is left after its first sample
        head.append((1, list(schedule[active][1]), "linear"))
    return [*head, *later]


def tail_indices(
    weights: Sequence[float], schedule: Optional[Sequence[Any]], resume_at: int, size: int
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(dataset_index, draw)`` of the ``size`` samples from ``resume_at`` on: the greedy
    blend of ``weights`` (or of ``schedule`` from ``resume_at``) started there."""
    if schedule is None:
        return build_blending_indices(numpy.asarray(weights, numpy.float64), size)
    return build_scheduled_blending_indices(*to_arrays(tail_schedule(schedule, resume_at)), size)


class ContinuedBlend(BlendedDataset):
    """``size`` samples over ``datasets`` continued from ``start`` at ``resume_at``.

    ``datasets``: one per source of the new blend (its order), each the dataset the
    source's stream is drawn from; ``weights``/``schedule``: the new blend's (normalised);
    ``start``: each stream's next position at ``resume_at`` (module docstring).
    ``prefix``: the new blend's own ``(dataset_index, dataset_sample_index)`` when its
    weights are fixed: megatron-core's greedy does not depend on the size, so the blend
    started at ``resume_at`` is their first ``size - resume_at`` entries (no build).
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[float],
        schedule: Optional[Sequence[Any]],
        config: Any,
        start: Sequence[int],
        resume_at: int,
        size: int,
        prefix: Optional[tuple[numpy.ndarray, numpy.ndarray]] = None,
    ) -> None:
        self.resume_at = int(resume_at)
        self.start = numpy.asarray(start, numpy.int64)
        count = size - self.resume_at
        if prefix is not None and schedule is None:
            tail, draws = prefix[0][:count], prefix[1][:count]
        else:
            tail, draws = tail_indices(weights, schedule, self.resume_at, count)
        lengths = numpy.asarray([max(len(d), 1) for d in datasets], numpy.int64)
        index = numpy.zeros(size, numpy.int16)  # calloc: the head's pages are never touched
        samples = numpy.zeros(size, numpy.int64)
        index[self.resume_at :] = tail
        positions = samples[self.resume_at :]
        numpy.add(numpy.take(self.start, tail), draws, out=positions)
        needed = self.start + numpy.bincount(tail, minlength=len(datasets))
        self.needed = needed  # each stream's position at the end
        if numpy.any(needed > lengths):  # a stream past its dataset: further rounds
            numpy.remainder(positions, lengths[tail], out=positions)
        self._given = (index, samples)
        super().__init__(datasets, list(weights), size, config)

    def _build_indices(self) -> tuple[numpy.ndarray, numpy.ndarray]:
        return self._given

    def consumed(self, consumed: int) -> numpy.ndarray:
        """Each source's stream position after ``consumed`` blended samples."""
        drawn = numpy.bincount(
            self.dataset_index[self.resume_at : consumed], minlength=len(self.start)
        )
        return self.start + drawn
