"""From global samples to document ranges, and back (``tokenloom trace``).

Forward: a global sample ``g`` of a blend is sample ``dataset_sample_index[g]`` of
source ``dataset_index[g]`` (megatron-core's ``BlendedDataset``); a GPT sample ``i`` is
sample-index row ``shuffle_index[i]``, whose document pieces
:func:`tokenloom.index.ranges.sample_ranges` gives as ``(document id, token start, token
end)`` rows (offsets relative to the document, end exclusive).

Backward (:func:`document_hits`): the positions of a document in ``document_index``, the
sample-index rows whose span covers them (``searchsorted`` on ``sample_index[:, 0]``),
the GPT samples of those rows (inverse shuffle), the global samples of those (inverse
blend), all vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from tokenloom.attributes import has_attribute
from tokenloom.errors import ConfigError


def parts(dataset: Any) -> list[Any]:
    """The GPT datasets of a blend (or the dataset itself)."""
    return list(dataset.datasets) if has_attribute(dataset, "dataset_index") else [dataset]


def locate(dataset: Any, samples: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(dataset_id, sample of that source)`` of each global sample."""
    samples = numpy.asarray(samples, dtype=numpy.int64)
    if not has_attribute(dataset, "dataset_index"):
        return numpy.zeros_like(samples), samples
    ids = numpy.asarray(dataset.dataset_index)[samples].astype(numpy.int64)  # gather, then widen
    inner = numpy.asarray(dataset.dataset_sample_index)[samples].astype(numpy.int64)
    return ids, inner


def range_source(part: Any) -> tuple[Any, Any, Any, int]:
    """``(document_index, sample_index, lengths, extra)`` of GPT ``part``, as
    :func:`tokenloom.index.ranges.blend_sample_ranges` takes a source."""
    return (
        part.document_index,
        part.sample_index,
        part.dataset.sequence_lengths,
        int(part.config.add_extra_token_to_sequence),
    )


def sample_csr(part: Any, inner: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """CSR ``(offsets, rows)`` of the document ranges of samples ``inner`` of GPT ``part``."""
    from tokenloom.index.ranges import sample_ranges

    rows = numpy.asarray(part.shuffle_index)[inner].astype(numpy.int64)
    return sample_ranges(
        part.document_index,
        part.sample_index,
        part.dataset.sequence_lengths,
        rows,
        int(part.config.add_extra_token_to_sequence),
    )


def sample_records(dataset: Any, samples: numpy.ndarray) -> list[dict[str, Any]]:
    """Per global sample: ``sample`` (its global index), ``source`` (the prefix),
    ``dataset_id``, ``dataset_sample`` and ``document_ranges`` (a list of rows)."""
    ids, inner = locate(dataset, samples)
    sources = parts(dataset)
    ranges: list[Any] = [None] * len(ids)
    for dataset_id in numpy.unique(ids):
        where = numpy.flatnonzero(ids == dataset_id)
        offsets, rows = sample_csr(sources[int(dataset_id)], inner[where])
        for k, position in enumerate(where):
            ranges[position] = rows[offsets[k] : offsets[k + 1]].tolist()
    return [
        {
            "sample": int(samples[k]),
            "source": str(sources[int(ids[k])].dataset_path),
            "dataset_id": int(ids[k]),
            "dataset_sample": int(inner[k]),
            "document_ranges": ranges[k],
        }
        for k in range(len(ids))
    ]


@dataclass(frozen=True)
class Hits:
    """Where a document is read: one entry per (global sample, range) that holds it."""

    samples: numpy.ndarray  # global sample indices
    ranges: numpy.ndarray  # [n, 3] its (document id, start, end) row in that sample
    epochs: numpy.ndarray  # which repetition (0-based) of the document each range reads


def _covering_rows(part: Any, document: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Sample-index rows whose span covers a position of ``document``, with the epoch of
    that position: its rank among the document's positions (megatron-core shuffles
    all epochs but the last together, so position // documents is not the epoch)."""
    document_index = numpy.asarray(part.document_index)
    positions = numpy.flatnonzero(document_index == document)
    starts = numpy.asarray(part.sample_index[:, 0], dtype=numpy.int64)
    count = starts.shape[0] - 1
    lo = numpy.maximum(numpy.searchsorted(starts, positions, side="left") - 1, 0)
    hi = numpy.minimum(numpy.searchsorted(starts, positions, side="right") - 1, count - 1)
    spans = numpy.maximum(hi - lo + 1, 0)
    owner = numpy.repeat(numpy.arange(positions.shape[0]), spans)
    rows = lo[owner] + (numpy.arange(owner.shape[0]) - (numpy.cumsum(spans) - spans)[owner])
    return rows, owner  # the k-th occurrence of a document is its k-th epoch (repetition)


def document_hits(dataset: Any, source: str, document: int) -> Hits:
    """Every global sample of ``dataset`` that holds tokens of ``document`` of the
    source whose prefix is ``source`` (ConfigError naming the prefixes when none is)."""
    sources = parts(dataset)
    chosen = [k for k, part in enumerate(sources) if str(part.dataset_path) == source]
    if not chosen:
        names = ", ".join(str(part.dataset_path) for part in sources)
        raise ConfigError(f"--document {source}:{document}: no source {source!r}; sources: {names}")
    found = [_part_hits(dataset, sources[k], k, document) for k in chosen]
    return Hits(
        *(numpy.concatenate([getattr(h, f) for h in found]) for f in Hits.__dataclass_fields__)
    )


def _part_hits(dataset: Any, part: Any, dataset_id: int, document: int) -> Hits:
    from tokenloom.index.ranges import sample_ranges

    rows, epochs = _covering_rows(part, document)
    rows, first = numpy.unique(rows, return_index=True)
    epochs = epochs[first]
    offsets, ranges = sample_ranges(
        part.document_index,
        part.sample_index,
        part.dataset.sequence_lengths,
        rows,
        int(part.config.add_extra_token_to_sequence),
    )
    hit = numpy.flatnonzero(ranges[:, 0] == document)
    owner = numpy.searchsorted(offsets, hit, side="right") - 1
    shuffle = numpy.asarray(part.shuffle_index, dtype=numpy.int64)
    inverse = numpy.full(int(part.sample_index.shape[0]) - 1, -1, dtype=numpy.int64)
    inverse[shuffle] = numpy.arange(shuffle.shape[0])
    inner = inverse[rows[owner]]
    keep = inner >= 0
    inner, kept, epoch = inner[keep], ranges[hit[keep]], epochs[owner[keep]]
    if not has_attribute(dataset, "dataset_index"):
        return Hits(inner, kept, epoch)
    samples, chosen = _inverse_blend(dataset, dataset_id, inner)
    return Hits(samples, kept[chosen].reshape(-1, 3), epoch[chosen])


def _inverse_blend(
    dataset: Any, dataset_id: int, inner: numpy.ndarray
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(global samples, k)``: every global sample that draws sample ``inner[k]`` of
    source ``dataset_id`` (a source drawn past its length gives a sample more than once)."""
    mine = numpy.flatnonzero(numpy.asarray(dataset.dataset_index) == dataset_id)
    drawn = numpy.asarray(dataset.dataset_sample_index)[mine].astype(numpy.int64)
    order = numpy.argsort(drawn, kind="stable")
    owner, at = match(drawn[order], inner)
    return mine[order[at]], owner


def match(keys: numpy.ndarray, queries: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(q, k)``: every pair with ``queries[q] == keys[k]`` (``keys`` sorted), in
    ``queries`` order."""
    lo = numpy.searchsorted(keys, queries, side="left")
    counts = numpy.searchsorted(keys, queries, side="right") - lo
    owner = numpy.repeat(numpy.arange(queries.shape[0]), counts)
    at = lo[owner] + (numpy.arange(owner.shape[0]) - (numpy.cumsum(counts) - counts)[owner])
    return owner, at


__all__ = [
    "Hits",
    "document_hits",
    "locate",
    "match",
    "parts",
    "range_source",
    "sample_csr",
    "sample_records",
]
