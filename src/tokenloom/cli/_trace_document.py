"""``tokenloom trace --document PREFIX:ID``: every step that trains on a document.

The global samples holding the document come from the inverted scan of
:func:`tokenloom.cli._trace_ranges.document_hits`; the steps from the run's order
(:func:`tokenloom.cli._trace_order.run_order`, the loaders' own samplers), joined by a
sorted search. No loop over steps touches the dataset.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError


def parse_document(text: str) -> tuple[str, int]:
    """``PREFIX:ID`` split at its last colon; ConfigError when ``ID`` is not an integer."""
    prefix, colon, number = text.rpartition(":")
    if not colon or not prefix or not number.isdigit():
        raise ConfigError(
            f"--document {text!r}: give PREFIX:ID, the source prefix as the config "
            "names it and the document (sequence) id, e.g. data/web_text_document:17"
        )
    return prefix, int(number)


def _served_pieces(samples: numpy.ndarray, flat: numpy.ndarray) -> tuple[Any, Any]:
    """``(position in the order, piece)`` of every served piece: one ``isin`` pass over
    the order, then a sorted match only where it holds the document's samples."""
    from tokenloom.cli._trace_ranges import match

    by_sample = numpy.argsort(samples, kind="stable")
    at = numpy.zeros(0, dtype=numpy.int64)
    if len(samples):
        at = numpy.flatnonzero(numpy.isin(flat, samples, kind="table"))
    served, piece = match(samples[by_sample], flat[at])
    return at[served], by_sample[piece]


def document_steps(
    dataset: Any,
    order: numpy.ndarray,
    source: str,
    document: int,
    first_step: int = 0,
    quarantine: Any = None,
) -> dict[str, Any]:
    """The steps (of ``order``, ``[steps, gbs]``) that serve ``document`` of ``source``:
    ``first_step``, ``count`` (document pieces served), ``steps``, ``epochs`` (the
    source's repetitions) and one ``hits`` row per piece; ``skipped``: the pieces in
    steps ``quarantine`` skips (consumed, never served); ``blocked``: whether the
    document is blocked (its served pieces get loss_mask 0: never trained on)."""
    from tokenloom.cli._trace_quarantine import Quarantine
    from tokenloom.cli._trace_ranges import document_hits

    quarantine = quarantine or Quarantine()
    hits = document_hits(dataset, source, document)
    served, piece = _served_pieces(hits.samples, order.reshape(-1))
    gbs = max(int(order.shape[1]) if order.ndim == 2 else 1, 1)
    steps = served // gbs + first_step
    skipped = quarantine.skipped(steps)
    served, piece, steps = served[~skipped], piece[~skipped], steps[~skipped]
    rows = [
        {
            "step": int(steps[k]),
            "position": int(served[k] % gbs),
            "sample": int(hits.samples[piece[k]]),
            "epoch": int(hits.epochs[piece[k]]),
            "token_start": int(hits.ranges[piece[k], 1]),
            "token_end": int(hits.ranges[piece[k], 2]),
        }
        for k in range(served.shape[0])
    ]
    unique_steps = sorted({row["step"] for row in rows})
    first: Optional[int] = unique_steps[0] if unique_steps else None
    return {
        "source": source,
        "document": document,
        "first_step": first,
        "count": len(rows),
        "steps": unique_steps,
        "epochs": sorted({row["epoch"] for row in rows}),
        "skipped": int(skipped.sum()),
        "blocked": bool(quarantine.blocked(source, [document])[0]),
        "hits": rows,
    }


def print_document(report: dict[str, Any], steps_in_run: int, limit: int = 20) -> None:
    """The human-readable ``--document`` report (the first ``limit`` pieces listed)."""
    name = f"document {report['document']} of {report['source']}"
    skipped = report.get("skipped", 0)
    also = f" ({skipped} more piece(s) in skipped steps)" if skipped else ""
    if report.get("blocked"):
        name += " is blocked (block_documents: loss_mask 0 on its labels, never trained on)"
    if report["first_step"] is None:
        print(f"{name}: not served in the run's {steps_in_run} steps{also}")
        return
    epochs = ", ".join(str(e) for e in report["epochs"])
    what = "served" if report.get("blocked") else "trained on"
    print(
        f"{name}: {what} {report['count']} time(s) in {len(report['steps'])} of "
        f"{steps_in_run} steps; first step {report['first_step']}; source epoch(s) "
        f"{epochs}{also}"
    )
    for row in report["hits"][:limit]:
        print(
            f"  step {row['step']} position {row['position']} (global sample "
            f"{row['sample']}): tokens [{row['token_start']}, {row['token_end']}) "
            f"epoch {row['epoch']}"
        )
    if report["count"] > limit:
        print(f"  ... {report['count'] - limit} more (--json lists all)")


__all__ = ["document_steps", "parse_document", "print_document"]
