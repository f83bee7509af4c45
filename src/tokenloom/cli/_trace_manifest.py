"""The data-order manifest of ``tokenloom trace --manifest`` and its ``--diff``.

A manifest is one JSON object (docs/trace.md):

* ``format``: ``"tokenloom-trace-manifest/2"`` (``/1``, written before quarantines were
  traced, is read as a ``/2`` without any);
* ``layout``: the loader arguments that decide the order;
* ``quarantine``: ``skip_batches`` (the skipped step ranges) and ``blocked_documents``
  (the block list's digest, as the loader state records it; None without one);
* ``sources``: the prefixes, in ``dataset_id`` order;
* ``first_step``, ``steps``: the steps it covers;
* ``batches``: one 16-hex-digit BLAKE2b-64 digest per step, of its samples'
  ``dataset_id`` (int64), their range counts (int64) and their ``(document id, token
  start, token end)`` rows (int64), in the global batch's order, then, only in a step
  that serves a blocked document, one byte per row (1: blocked); ``"skipped"`` for a
  skipped step;
* ``mix``: per step, the samples drawn from each source (``dataset_id`` order; zeros
  for a skipped step);
* ``checksum``: SHA-256 of the JSON of all the other fields (sorted keys, no spaces).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import numpy

from tokenloom.errors import ConfigError

FORMAT = "tokenloom-trace-manifest/2"
_READS = ("tokenloom-trace-manifest/1", FORMAT)
SKIPPED = "skipped"
_CHUNK = 4096


def _flat_ranges(dataset: Any, samples: numpy.ndarray) -> tuple[Any, Any, Any]:
    """``(dataset ids, offsets, rows)`` of ``samples`` as one CSR in their order."""
    from tokenloom.cli._trace_ranges import locate, parts, range_source
    from tokenloom.index.ranges import blend_sample_ranges

    ids, inner = locate(dataset, samples)
    sources = parts(dataset)
    rows = numpy.empty(inner.shape[0], dtype=numpy.int64)
    for dataset_id, part in enumerate(sources):
        where = numpy.flatnonzero(ids == dataset_id)
        rows[where] = numpy.asarray(part.shuffle_index)[inner[where]]
    offsets, ranges = blend_sample_ranges([range_source(part) for part in sources], ids, rows)
    return ids, offsets, ranges


def step_digests(
    dataset: Any, order: numpy.ndarray, first_step: int = 0, quarantine: Any = None
) -> tuple[list[str], list[list[int]]]:
    """The digest and the per-source sample counts of each row (step) of ``order``
    (steps ``first_step``, ...), skipped steps and blocked ranges as ``quarantine`` says."""
    from tokenloom.cli._trace_quarantine import Quarantine, blocked_rows
    from tokenloom.cli._trace_ranges import parts

    quarantine = quarantine or Quarantine()
    names = [str(part.dataset_path) for part in parts(dataset)]
    gbs = int(order.shape[1]) if order.ndim == 2 else 0
    skipped = quarantine.skipped(numpy.arange(order.shape[0]) + first_step)
    digests: list[str] = []
    mix: list[list[int]] = []
    for begin in range(0, order.shape[0], _CHUNK):
        chunk = order[begin : begin + _CHUNK]
        ids, offsets, rows = _flat_ranges(dataset, chunk.reshape(-1))
        blocked = blocked_rows(quarantine, names, ids, offsets, rows).astype(numpy.uint8)
        bounds = offsets[:: max(gbs, 1)]  # each step's first row, and the end
        total = numpy.concatenate([[0], numpy.cumsum(blocked, dtype=numpy.int64)])
        serves_blocked = total[bounds[1:]] > total[bounds[:-1]]
        counts = numpy.diff(offsets)
        steps = numpy.repeat(numpy.arange(chunk.shape[0]), gbs) * len(names)
        per_source = numpy.bincount(steps + ids, minlength=chunk.shape[0] * len(names))
        mixes = per_source.reshape(chunk.shape[0], len(names)).tolist()
        for k in range(chunk.shape[0]):
            if skipped[begin + k]:
                digests.append(SKIPPED)
                mix.append([0] * len(names))
                continue
            a, b = k * gbs, (k + 1) * gbs
            digest = hashlib.blake2b(digest_size=8)
            digest.update(ids[a:b].tobytes())
            digest.update(counts[a:b].tobytes())
            digest.update(rows[offsets[a] : offsets[b]].tobytes())
            if serves_blocked[k]:
                digest.update(blocked[offsets[a] : offsets[b]].tobytes())
            digests.append(digest.hexdigest())
            mix.append(mixes[k])
    return digests, mix


def _checksum(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_manifest(
    dataset: Any,
    order: numpy.ndarray,
    layout: dict[str, Any],
    first_step: int,
    quarantine: Any = None,
) -> dict[str, Any]:
    """The manifest of the steps in ``order`` (``[steps, global_batch_size]``)."""
    from tokenloom.cli._trace_quarantine import Quarantine
    from tokenloom.cli._trace_ranges import parts

    quarantine = quarantine or Quarantine()
    digests, mix = step_digests(dataset, order, first_step, quarantine)
    body = {
        "format": FORMAT,
        "layout": layout,
        "quarantine": quarantine.describe(),
        "sources": [str(part.dataset_path) for part in parts(dataset)],
        "first_step": int(first_step),
        "steps": int(order.shape[0]),
        "batches": digests,
        "mix": mix,
    }
    return {**body, "checksum": _checksum(body)}


def read_manifest(path: str) -> dict[str, Any]:
    """A manifest file, checked (format, fields, checksum); ConfigError naming the file."""
    from tokenloom.untrusted_json import loads_json, read_bounded

    try:
        data = loads_json(read_bounded(path, what="manifest"), source=path, what="manifest")
    except OSError as error:
        raise ConfigError(f"manifest {path}: cannot read it ({error})") from None
    if not isinstance(data, dict) or data.get("format") not in _READS:
        raise ConfigError(f"manifest {path}: not a {FORMAT} file (write one with --manifest)")
    body = {key: value for key, value in data.items() if key != "checksum"}
    if data.get("checksum") != _checksum(body):
        raise ConfigError(
            f"manifest {path}: checksum mismatch, the file was changed or truncated; "
            "write it again with tokenloom trace --manifest"
        )
    data.setdefault("quarantine", {"skip_batches": [], "blocked_documents": None})
    return data


def _header_changes(one: dict[str, Any], two: dict[str, Any]) -> list[str]:
    changes = []
    for key in sorted(set(one["layout"]) | set(two["layout"])):
        a, b = one["layout"].get(key), two["layout"].get(key)
        if a != b:
            changes.append(f"layout {key}: {a!r} vs {b!r}")
    for key in ("skip_batches", "blocked_documents"):
        a, b = one["quarantine"].get(key), two["quarantine"].get(key)
        if a != b:
            changes.append(f"quarantine {key}: {a!r} vs {b!r}")
    if one["sources"] != two["sources"]:
        changes.append(f"sources: {one['sources']} vs {two['sources']}")
    return changes


def _step_change(step: int, a: str, b: str, mix_a: Any, mix_b: Any) -> str:
    if SKIPPED in (a, b):
        return f"step {step}: " + ("skipped vs served" if a == SKIPPED else "served vs skipped")
    if mix_a != mix_b:
        return f"step {step}: samples per source {mix_a} vs {mix_b}"
    return f"step {step}: same samples per source {mix_a}, other documents, token ranges or order"


def diff_manifests(one: dict[str, Any], two: dict[str, Any]) -> tuple[Optional[int], list[str]]:
    """``(first differing step or None, lines saying what differs)`` over the steps both
    cover; steps covered by one only are reported too."""
    lines = _header_changes(one, two)
    start = max(one["first_step"], two["first_step"])
    stop = min(one["first_step"] + one["steps"], two["first_step"] + two["steps"])
    for step in range(start, stop):
        i, j = step - one["first_step"], step - two["first_step"]
        if one["batches"][i] == two["batches"][j]:
            continue
        a, b = one["batches"][i], two["batches"][j]
        lines.append(_step_change(step, a, b, one["mix"][i], two["mix"][j]))
        return step, lines
    if (one["first_step"], one["steps"]) != (two["first_step"], two["steps"]):
        lines.append(
            f"steps covered: {one['first_step']}..{one['first_step'] + one['steps'] - 1} vs "
            f"{two['first_step']}..{two['first_step'] + two['steps'] - 1} (equal where both are)"
        )
    return None, lines


__all__ = ["FORMAT", "SKIPPED", "diff_manifests", "make_manifest", "read_manifest", "step_digests"]
