"""The sidecar file itself: where it lives, its format, writing it for a preprocess
run, and reading it back (refused when it is not a tokenloom sidecar, set aside when it
disagrees with the pair beside it)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import FormatError, UntrustedFileError
from tokenloom.format.spec import get_bin_path, get_idx_path, read_index_header
from tokenloom.provenance.inputs import describe_inputs
from tokenloom.provenance.tokenizer import tokenizer_identity
from tokenloom.untrusted_json import read_json_file

__all__ = [
    "FORMAT",
    "MAX_SIDECAR_BYTES",
    "SUFFIX",
    "encode_sidecar",
    "pair_counts",
    "preprocess_sidecars",
    "read_sidecar",
    "read_sidecars",
    "sidecar_path",
    "stale_problems",
    "tool_version",
]

FORMAT = "tokenloom-provenance/1"
SUFFIX = ".json"
MAX_SIDECAR_BYTES = 256 * 1024 * 1024
"""The largest sidecar read (a merge of ~a million inputs); a larger one is refused."""


def sidecar_path(prefix: str) -> str:
    """``PREFIX.json``: where the sidecar of ``prefix`` lives."""
    return f"{os.fspath(prefix)}{SUFFIX}"


def tool_version() -> str:
    """The tokenloom version that writes sidecars."""
    from importlib import metadata

    try:
        return metadata.version("tokenloom")
    except metadata.PackageNotFoundError:
        from tokenloom._version import __version__

        return __version__


def encode_sidecar(record: Mapping[str, Any]) -> bytes:
    """The bytes of a sidecar (indented, sorted-free JSON, trailing newline)."""
    return (json.dumps(record, indent=2) + "\n").encode("utf-8")


def _counts(stats: Any, itemsize: int) -> dict[str, int]:
    tokens = int(stats.tokens)
    return {
        "documents": int(stats.documents),
        "sequences": int(stats.sequences),
        "tokens": tokens,
        "empty_documents": int(stats.empty_documents),
        "bin_bytes": tokens * itemsize,
    }


def preprocess_sidecars(
    inputs: Any,
    tokenizer: Any,
    summary: Any,
    *,
    append_eod: bool,
    level: str,
    partitions: int = 1,
    keep_sequential_samples: bool = False,
    sentence_splitter: Any = None,
) -> dict[str, dict[str, bytes]]:
    """``{json key: {".json": sidecar bytes}}`` for every output of a preprocess run.

    ``summary`` is the run's :class:`~tokenloom.preprocess.summary.PreprocessSummary`
    (its ``outputs`` hold each key's counts and ``dtype`` the token dtype)."""
    identity = tokenizer_identity(tokenizer)
    described = describe_inputs(inputs)
    itemsize = numpy.dtype(summary.dtype).itemsize
    eod = read_attribute(tokenizer, "eod", None)
    skipped: dict[str, int] = {}
    for (reason, key), count in dict(read_attribute(summary, "skipped", {}) or {}).items():
        skipped[f"{reason}:{key}"] = int(count)
    files = {}
    for key, stats in summary.outputs.items():
        settings = {
            "json_key": key,
            "level": level,
            "dtype": str(summary.dtype),
            "append_eod": bool(append_eod),
            "eod_id": None if not append_eod or eod is None else int(eod),
            "add_special_tokens": identity.get("add_special_tokens", identity.get("add_bos")),
            "partitions": int(partitions),
            "keep_sequential_samples": bool(keep_sequential_samples),
            "sentence_splitter": None
            if sentence_splitter is None
            else read_attribute(sentence_splitter, "__name__", type(sentence_splitter).__name__),
        }
        record = {
            "format": FORMAT,
            "tool": {"name": "tokenloom", "version": tool_version()},
            "tokenizer": identity,
            "settings": settings,
            "inputs": described,
            "counts": _counts(stats, itemsize),
            "skipped_records": skipped,
        }
        files[key] = {SUFFIX: encode_sidecar(record)}
    return files


def pair_counts(prefix: str) -> dict[str, int]:
    """Sequence and document counts and ``.bin`` size of a pair, from its files."""
    header = read_index_header(get_idx_path(prefix))
    size = os.path.getsize(get_bin_path(prefix))
    return {
        "documents": header.num_documents,
        "sequences": header.sequence_count,
        "tokens": size // numpy.dtype(header.dtype).itemsize,
        "bin_bytes": size,
    }


def read_sidecar(prefix: str) -> Optional[dict[str, Any]]:
    """The sidecar of ``prefix``, or None when there is none (a Megatron-built pair).

    Raises FormatError naming the file when one exists but is not a tokenloom sidecar
    (not JSON, larger than :data:`MAX_SIDECAR_BYTES`, nested too deeply, not a regular
    file: read by :mod:`tokenloom.untrusted_json`)."""
    path = sidecar_path(prefix)
    try:
        record = read_json_file(path, what="provenance sidecar", max_bytes=MAX_SIDECAR_BYTES)
    except FileNotFoundError:
        return None
    except UntrustedFileError as error:  # not JSON, too large, too deep, not a regular file
        raise FormatError(
            f"{path}: provenance sidecar {error.problem}; delete it "
            "(the .bin/.idx do not need it) or rewrite the dataset"
        ) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise FormatError(
            f"{path}: not a tokenloom provenance sidecar (format {found!r}, "
            f"expected {FORMAT!r}); rename it if it is another tool's file"
        )
    return record


def stale_problems(prefix: str, record: Mapping[str, Any]) -> list[str]:
    """Where the sidecar disagrees with the pair it sits beside (the pair was replaced
    by another tool): empty when it matches."""
    counts = record.get("counts") or {}
    found = pair_counts(prefix)
    return [
        f"{sidecar_path(prefix)} records {name} {counts[name]} but the pair has {value}"
        for name, value in found.items()
        if name in counts and counts[name] != value
    ]


def read_sidecars(
    prefixes: Sequence[str],
) -> tuple[list[tuple[str, Optional[dict[str, Any]]]], list[str]]:
    """``(prefix, sidecar or None)`` for each prefix, and notes: a stale sidecar (one
    that disagrees with its pair) counts as none, with a note saying why."""
    result, notes = [], []
    for prefix in prefixes:
        record = read_sidecar(prefix)
        problems = stale_problems(prefix, record) if record is not None else []
        if problems:
            notes += [f"warning: stale sidecar ignored: {problem}" for problem in problems]
            record = None
        result.append((prefix, record))
    return result, notes
