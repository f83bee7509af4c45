"""The provenance sidecar that ``tokenloom inspect`` shows, beside a local or a remote pair.

``tokenloom preprocess --output-prefix s3://...`` uploads ``PREFIX.json`` with the
pair; :func:`read_provenance` reads it back from there as it reads a local one: at
most :data:`tokenloom.provenance.MAX_SIDECAR_BYTES` (an object larger than that is
refused from its HEAD, never read), parsed by :mod:`tokenloom.untrusted_json` under its
depth cap.  A missing sidecar is "none"; one that is present but unreadable, or that
disagrees with the pair (stale), is a note, never a failure of the inspection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import numpy

from tokenloom.errors import FormatError, ObjectNotFoundError, UntrustedFileError

_WHAT = "provenance sidecar"


def _unreadable(url: str, problem: str) -> FormatError:
    return FormatError(
        f"{url}: {_WHAT} {problem}; delete it (the .bin/.idx do not need it) or rewrite the dataset"
    )


def read_remote_sidecar(prefix: str) -> Optional[dict[str, Any]]:
    """The sidecar object of the remote pair ``prefix``, or None when there is none;
    FormatError naming it when it is too large, too deep, not JSON or not a sidecar."""
    from tokenloom.provenance import FORMAT, MAX_SIDECAR_BYTES, sidecar_path
    from tokenloom.storage.object_file import read_object_at_most
    from tokenloom.untrusted_json import loads_json

    url = sidecar_path(prefix)
    try:
        data = read_object_at_most(url, MAX_SIDECAR_BYTES, what=_WHAT)
        record = loads_json(data, source=url, what=_WHAT, max_bytes=MAX_SIDECAR_BYTES)
    except ObjectNotFoundError:
        return None
    except UntrustedFileError as error:
        raise _unreadable(url, error.problem) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise FormatError(
            f"{url}: not a tokenloom provenance sidecar (format {found!r}, expected "
            f"{FORMAT!r}); rename it if it is another tool's file"
        )
    return record


def _stale(prefix: str, record: Mapping[str, Any], summary: Mapping[str, Any]) -> list[str]:
    """Where the sidecar's counts disagree with the pair's (from the inspection summary)."""
    from tokenloom.provenance import sidecar_path

    counts = record.get("counts") or {}
    found = {
        "documents": summary["document_count"],
        "sequences": summary["sequence_count"],
        "tokens": int(summary["bin_bytes"]) // numpy.dtype(summary["dtype"]).itemsize,
        "bin_bytes": summary["bin_bytes"],
    }
    return [
        f"{sidecar_path(prefix)} records {name} {counts[name]} but the pair has {value}"
        for name, value in found.items()
        if name in counts and counts[name] != value
    ]


def read_provenance(
    prefix: str, summary: Mapping[str, Any]
) -> tuple[Optional[dict[str, Any]], list[str], Optional[str]]:
    """``(sidecar or None, notes, why it is unreadable or None)`` of a local or remote
    pair; ``summary`` is the pair's inspection summary (its counts)."""
    from tokenloom.provenance import read_sidecar, sidecar_path
    from tokenloom.storage.urls import is_remote

    try:
        record = read_remote_sidecar(prefix) if is_remote(prefix) else read_sidecar(prefix)
    except FormatError as error:
        why = str(error).removeprefix(f"{sidecar_path(prefix)}: ").split("; ")[0]
        return None, [f"warning: {error}"], why
    if record is None:
        return None, [], None
    notes = [f"warning: stale sidecar: {problem}" for problem in _stale(prefix, record, summary)]
    return record, notes, None


__all__ = ["read_provenance", "read_remote_sidecar"]
