"""Quarantine that survives restarts: skipped global steps and blocked documents.

* ``skip_batches=[(first, end), ...]``: global steps ``first <= step < end`` (0-based,
  ``end`` exclusive) are never served. A step is ``global_batch_size`` samples when the
  loader has one, else one ``micro_batch_size * data_parallel_size`` batch; the step of
  a batch is ``consumed_samples // step`` when it is drawn. Skipping *consumes* the
  samples of those steps, so every later batch is exactly the unskipped run's at that
  step. Ranges are sorted and merged (overlapping or touching ones become one).
* ``block_documents=["PREFIX:document_id", ...]`` (or the path of a file with one per
  line): the ``loss_mask`` is 0 wherever the *label* (the predicted token) comes from a
  blocked document; tokens, labels and every other mask value are unchanged. The
  document id is the sequence row of ``PREFIX.idx`` (what
  :meth:`GPTDataset.document_ranges` reports).

Both are in the loader state: a resume without ``skip_batches`` keeps the saved ranges, one
with ranges must cover every saved step (it may add ranges), anything else is refused. The
block list's digest is in the state's dataset fingerprint: another list is refused
unless ``load_state_dict(state, allow_data_change=True)``.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.training.checks import describe, is_integer
from tokenloom.training.samplers import RandomSeedDataset

__all__ = [
    "DocumentBlocker",
    "Requests",
    "check_blocked",
    "normalize_skip_batches",
    "resume_skip_batches",
    "skip_end",
    "skipped_steps",
]

logger = logging.getLogger(__name__)

Ranges = tuple[tuple[int, int], ...]


def normalize_skip_batches(value: Any) -> Ranges:
    """``skip_batches`` sorted and merged, or ConfigError naming the bad value."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"skip_batches={describe(value)}: must be a list of (first, end) step ranges"
        )
    pairs = []
    for pair in value:
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(is_integer(x) and not isinstance(x, bool) for x in pair)
            or not 0 <= pair[0] < pair[1]
        ):
            raise ConfigError(
                f"skip_batches entry {describe(pair)}: must be (first, end) with "
                "0 <= first < end (0-based global steps, end exclusive)"
            )
        pairs.append((int(pair[0]), int(pair[1])))
    merged: list[tuple[int, int]] = []
    for first, end in sorted(pairs):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((first, end))
    return tuple(merged)


def skipped_steps(ranges: Ranges) -> int:
    """How many steps ``ranges`` skip."""
    return sum(end - first for first, end in ranges)


def _covers(new: Ranges, old: Ranges) -> bool:
    return all(any(a <= first and end <= b for a, b in new) for first, end in old)


def resume_skip_batches(saved: Sequence[Sequence[int]], current: Ranges) -> Ranges:
    """The ranges a resumed loader skips: the saved ones when it was built without any,
    its own when they cover every saved step, else ConfigError."""
    old = normalize_skip_batches([tuple(pair) for pair in saved])
    if not current:
        return old
    if _covers(current, old):
        return current
    raise ConfigError(
        f"loader state skips the steps {list(map(list, old))} but this loader was built with "
        f"skip_batches={list(map(list, current))}, which does not cover them; build it with "
        "the saved ranges (or without skip_batches, which keeps them), adding new ones"
    )


def skip_unit(options: dict[str, Any], step: int) -> int:
    """Samples per skipped step: ``global_batch_size`` when given (a multiple of ``step``,
    the samples one loader batch takes over all ranks), else ``step``."""
    unit = options["global_batch_size"] or step
    if options["skip_batches"] and unit % step:
        raise ConfigError(
            f"skip_batches needs global_batch_size={unit} to be a multiple of "
            f"micro_batch_size * data_parallel_size = {step}"
        )
    return int(unit)


class Requests:
    """The DataLoader's sampler: ``(epoch, indices)`` per batch, after skipping ``skip``
    batches of the sampler, minus the batches of skipped steps.

    Batch ``n`` of the sampler starts at ``start + n * step`` consumed samples; ``drawn``
    counts the sampler's batches so far (the consumed count after a pass is
    ``start + drawn * step`` whatever was skipped).
    """

    def __init__(self, sampler: Any, skip: int) -> None:
        self.sampler, self.skip = sampler, skip
        self.start, self.step, self.unit, self.drawn = 0, 1, 1, 0
        self.ranges: Ranges = ()

    def __iter__(self) -> Iterator[tuple[int, list[int]]]:
        self.drawn = 0
        batches = iter(self.sampler)
        for _ in range(self.skip):
            if next(batches, None) is not None:
                self.drawn += 1
        for indices in batches:
            consumed = self.start + self.drawn * self.step
            self.drawn += 1
            if skip_end(consumed, self.ranges, self.unit) == consumed:
                yield read_attribute(self.sampler, "epoch", 0), indices


def check_blocked(saved: Optional[str], current: Optional[str], allow: bool) -> None:
    """ConfigError (with ``allow``: a warning) when the state's block list digest differs."""
    if saved == current:
        return
    message = (
        f"loader state was saved with block_documents digest {saved!r}, this loader has "
        f"{current!r} (None: no blocked document)"
    )
    if not allow:
        raise ConfigError(
            f"{message}; build it with the block_documents the state was saved with, or, if "
            "the change is deliberate, load it with load_state_dict(state, "
            "allow_data_change=True)"
        )
    logger.warning("%s; loaded anyway (allow_data_change=True)", message)


def skip_end(consumed: int, ranges: Ranges, unit: int) -> int:
    """``consumed`` moved past the skipped range its step is in (unchanged when none)."""
    step = consumed // unit
    for first, end in ranges:
        if first <= step < end:
            return end * unit
    return consumed


class DocumentBlocker:
    """Zeroes the loss_mask of blocked documents' tokens in a collated batch."""

    def __init__(self, blocked: dict[str, numpy.ndarray], digest: str) -> None:
        self.blocked, self.digest = blocked, digest

    @classmethod
    def build(cls, dataset: Any, value: Any) -> Optional[DocumentBlocker]:
        """The blocker of ``block_documents`` over ``dataset`` (None when empty), or
        ConfigError for a malformed entry, an unknown prefix or an id past the file."""
        entries = _entries(value)
        if not entries:
            return None
        parts = {_canonical(prefix): prefix for prefix in _prefixes(dataset)}
        ids: dict[str, set[int]] = {}
        for entry in entries:
            prefix, _, number = entry.rpartition(":")
            if not prefix or not number.isdigit():
                raise ConfigError(
                    f"block_documents entry {entry!r}: must be 'PREFIX:document_id' "
                    "(the .bin/.idx path prefix and a sequence row of its .idx)"
                )
            if _canonical(prefix) not in parts:
                raise ConfigError(
                    f"block_documents entry {entry!r}: the dataset reads no prefix "
                    f"{prefix!r} (it reads {sorted(parts.values())})"
                )
            count = _sequence_count(parts[_canonical(prefix)], dataset)
            if count is not None and int(number) >= count:
                raise ConfigError(
                    f"block_documents entry {entry!r}: {prefix}.idx has {count} sequences "
                    f"(ids 0 to {count - 1})"
                )
            ids.setdefault(_canonical(prefix), set()).add(int(number))
        text = "\n".join(sorted(f"{p}:{d}" for p, docs in ids.items() for d in docs))
        digest = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
        return cls({p: numpy.array(sorted(d), numpy.int64) for p, d in ids.items()}, digest)

    def blocks(self, prefix: str, documents: Any) -> numpy.ndarray:
        """Whether each of ``documents`` (ids of the source ``prefix``) is blocked."""
        blocked = self.blocked.get(_canonical(str(prefix)))
        documents = numpy.asarray(documents, dtype=numpy.int64)
        if blocked is None:
            return numpy.zeros(documents.shape, dtype=bool)
        return numpy.isin(documents, blocked)

    def mask(self, dataset: Any, indices: Sequence[int], loss_mask: Any) -> None:
        """Set ``loss_mask[row]`` to 0 where sample ``indices[row]``'s label token is
        from a blocked document (``loss_mask``: a ``[B, seq]`` tensor or array)."""
        parts, positions = _sources(dataset, numpy.asarray(indices, numpy.int64))
        seq = loss_mask.shape[1]
        for part in numpy.unique(parts):
            gpt = _part(dataset, int(part))
            blocked = self.blocked.get(_canonical(str(gpt.dataset_path)))
            if blocked is None:
                continue
            rows = numpy.flatnonzero(parts == part)
            offsets, ranges = gpt.document_ranges(positions[rows])
            for k, row in enumerate(rows):
                lengths = (
                    ranges[offsets[k] : offsets[k + 1], 2] - ranges[offsets[k] : offsets[k + 1], 1]
                )
                starts = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]])
                hit = numpy.isin(ranges[offsets[k] : offsets[k + 1], 0], blocked)
                for start, length in zip(starts[hit], lengths[hit]):
                    # label i is text token i + 1: labels in [start - 1, start + length - 1)
                    loss_mask[row, max(int(start) - 1, 0) : min(int(start + length) - 1, seq)] = 0


def _entries(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        try:
            with open(value, encoding="utf-8") as handle:
                lines = [line.strip() for line in handle]
        except OSError as error:
            raise ConfigError(
                f"block_documents={str(value)!r}: cannot read the file ({error}); pass a "
                "file with one 'PREFIX:document_id' per line, or a list of them"
            ) from error
        return [line for line in lines if line and not line.startswith("#")]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"block_documents={describe(value)}: must be a list of 'PREFIX:document_id' "
            "strings or the path of a file with one per line"
        )
    return list(value)


def _canonical(prefix: str) -> str:
    return prefix if "://" in prefix else os.path.abspath(prefix)


def _target(dataset: Any) -> Any:
    return dataset.dataset if isinstance(dataset, RandomSeedDataset) else dataset


def _prefixes(dataset: Any) -> list[str]:
    target = _target(dataset)
    parts = read_attribute(target, "datasets", None) or [target]
    prefixes = [read_attribute(part, "dataset_path", None) for part in parts]
    if any(p is None for p in prefixes) or not all(
        read_attribute(part, "document_ranges", None) for part in parts
    ):
        raise ConfigError(
            f"block_documents needs a GPTDataset (or a blend of them) read from files; "
            f"got {type(target).__name__}"
        )
    return [str(p) for p in prefixes]


def _sequence_count(prefix: str, dataset: Any) -> Optional[int]:
    target = _target(dataset)
    for part in read_attribute(target, "datasets", None) or [target]:
        if str(read_attribute(part, "dataset_path", None)) == prefix:
            lengths = read_attribute(
                read_attribute(part, "dataset", None), "sequence_lengths", None
            )
            return None if lengths is None else len(lengths)
    return None


def _part(dataset: Any, part: int) -> Any:
    target = _target(dataset)
    parts = read_attribute(target, "datasets", None)
    return target if parts is None else parts[part]


def _sources(dataset: Any, indices: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(part, position in that part)`` of every sample index."""
    target = _target(dataset)
    if read_attribute(target, "datasets", None) is None:
        return numpy.zeros(len(indices), numpy.int64), indices
    return target.dataset_index[indices].astype(numpy.int64), target.dataset_sample_index[indices]
