"""The run's quarantine in the trace: skipped steps and blocked documents.

The loader's own rules (:mod:`tokenloom.training.quarantine`) decide both:

* a global step in ``skip_batches`` is never served but consumes its samples, so every
  other step holds what it holds in the run without skips: the trace keeps the order
  and marks those steps skipped (nothing of theirs is trained on);
* a document in ``block_documents`` is served with ``loss_mask`` 0 on every label it
  gives: the trace marks its ranges ``blocked`` (the loader's
  :class:`~tokenloom.training.quarantine.DocumentBlocker` says which).

With ``--state`` the ranges are the ones the resumed loader skips: its own
``load_state_dict`` merges the saved ranges with the config's (and refuses a state saved
with another block list), and the trace reads them back from its ``state_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy


@dataclass(frozen=True)
class Quarantine:
    """``skip_batches`` (sorted, merged step ranges, end exclusive) and the block list
    (``block_documents`` as given, and its blocker; None when no document is blocked)."""

    skip_batches: tuple[tuple[int, int], ...] = ()
    block_documents: Any = None
    blocker: Any = None

    def skipped(self, steps: Any) -> numpy.ndarray:
        """Whether each of ``steps`` (0-based global steps) is skipped (vectorised)."""
        steps = numpy.asarray(steps, dtype=numpy.int64)
        if not self.skip_batches:
            return numpy.zeros(steps.shape, dtype=bool)
        firsts = numpy.array([first for first, _ in self.skip_batches], dtype=numpy.int64)
        ends = numpy.array([end for _, end in self.skip_batches], dtype=numpy.int64)
        at = numpy.searchsorted(firsts, steps, side="right") - 1
        return (at >= 0) & (steps < ends[numpy.maximum(at, 0)])

    def skip_range(self, step: int) -> Optional[tuple[int, int]]:
        """The ``(first, end)`` range that skips ``step``, or None."""
        return next(((a, b) for a, b in self.skip_batches if a <= step < b), None)

    def blocked(self, source: str, documents: Any) -> numpy.ndarray:
        """Whether each of ``documents`` of the source ``source`` is blocked."""
        if self.blocker is None:
            return numpy.zeros(numpy.shape(documents), dtype=bool)
        return numpy.asarray(self.blocker.blocks(source, documents), dtype=bool)

    def describe(self) -> dict[str, Any]:
        """The manifest's ``quarantine`` field: the ranges and the block list's digest
        (the loader state's ``blocked_documents``)."""
        return {
            "skip_batches": [list(pair) for pair in self.skip_batches],
            "blocked_documents": None if self.blocker is None else str(self.blocker.digest),
        }


def quarantine_of(dataset: Any, settings: dict[str, Any]) -> Quarantine:
    """The quarantine of the config's ``skip_batches`` and ``block_documents`` keys over
    ``dataset`` (the loader's own checks: ConfigError naming the bad entry)."""
    from tokenloom.training.quarantine import DocumentBlocker, normalize_skip_batches

    blocks = settings.get("block_documents")
    return Quarantine(
        normalize_skip_batches(settings.get("skip_batches")),
        blocks,
        DocumentBlocker.build(dataset, blocks),
    )


def resumed(quarantine: Quarantine, skip_batches: Any) -> Quarantine:
    """``quarantine`` with the ranges a resumed loader reports in its ``state_dict()``."""
    from tokenloom.training.quarantine import normalize_skip_batches

    ranges = normalize_skip_batches([tuple(pair) for pair in skip_batches])
    return replace(quarantine, skip_batches=ranges)


def blocked_rows(quarantine: Quarantine, sources: list[str], ids: Any, offsets: Any, rows: Any):
    """Per range row of a CSR (``ids`` per sample, ``offsets``, ``rows``): blocked?"""
    flags = numpy.zeros(numpy.shape(rows)[0], dtype=bool)
    if quarantine.blocker is None or not flags.shape[0]:
        return flags
    owner = numpy.repeat(numpy.asarray(ids), numpy.diff(offsets))
    for dataset_id, source in enumerate(sources):
        where = numpy.flatnonzero(owner == dataset_id)
        if where.shape[0]:
            flags[where] = quarantine.blocked(source, rows[where, 0])
    return flags


__all__ = ["Quarantine", "blocked_rows", "quarantine_of", "resumed"]
