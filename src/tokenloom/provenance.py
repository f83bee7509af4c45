"""Provenance sidecars: ``PREFIX.json`` next to a ``.bin``/``.idx`` pair says how it was made.

A sidecar holds the tokenizer's identity (kind, file hashes, vocabulary size, special
tokens and their ids), the settings that shaped the ids (special tokens added, EOD
appended, JSON key, sequence level), the inputs (paths, sizes, SHA-256), the tool
version and the document, sequence and token counts.  ``tokenloom preprocess`` and
``tokenloom merge`` publish it atomically with the pair (one journaled publish, see
:mod:`tokenloom.format.publish`); the ``.bin``/``.idx`` bytes stay exactly Megatron's.

The sidecar is optional to read.  Datasets built by Megatron have none, and every
reader works without one: :func:`read_sidecar` returns None, and the merge check
(:func:`check_tokenizers`) notes what it could not check instead of failing.

Schema (``"format": "tokenloom-provenance/1"``)::

    {"format", "tool": {"name", "version"}, "tokenizer": {identity},
     "settings": {"json_key", "level", "append_eod", "eod_id", "add_special_tokens", ...},
     "inputs": [{"kind": "file", "path", "bytes", "sha256"}, ...],
     "counts": {"documents", "sequences", "tokens", "empty_documents", "bin_bytes"}}

A merged pair's sidecar has ``"merged_from"`` (each input prefix, its counts and
settings) instead of ``settings``; its ``tokenizer`` is null when some input had no
sidecar, and ``{"kind": "mixed", "parts": [...]}`` after merging pairs of different
tokenizers (allowed only on request).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError, FormatError, UntrustedFileError
from tokenloom.format.spec import get_bin_path, get_idx_path, read_index_header
from tokenloom.untrusted_json import read_json_file

FORMAT = "tokenloom-provenance/1"
SUFFIX = ".json"
MAX_SIDECAR_BYTES = 256 * 1024 * 1024
"""The largest sidecar read (a merge of ~a million inputs); a larger one is refused."""
# identity keys that are settings of one vocabulary, not a different vocabulary
_SETTING_KEYS = ("add_special_tokens", "add_bos")
_NOT_COMPARED = ("files",) + _SETTING_KEYS


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


# -- tokenizer identity -------------------------------------------------------------------
def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """The tokenizer's identity, JSON-ready.

    Uses the tokenizer's own ``identity()`` where it has one (tokenloom's adapters);
    otherwise derives it from the public attributes (``vocab_size``, ``eod``, ``pad``,
    ``unique_identifiers``)."""
    own = read_attribute(tokenizer, "identity", None)
    identity = dict(own()) if callable(own) else _derived_identity(tokenizer)
    return json.loads(json.dumps(identity, default=str))  # plain JSON types only


def _derived_identity(tokenizer: Any) -> dict[str, Any]:
    identity: dict[str, Any] = {"kind": type(tokenizer).__name__}
    for name, value in dict(read_attribute(tokenizer, "unique_identifiers", None) or {}).items():
        if name != "class":
            identity["files" if name == "tokenizer_path" else name] = value
    for name in ("vocab_size", "eod", "pad"):
        value = read_attribute(tokenizer, name, None)
        identity[name] = None if value is None else int(value)
    identity.setdefault("special_tokens", {})
    return identity


def _short_hash(identity: Mapping[str, Any]) -> str:
    digest = identity.get("sha256")
    return f" sha256 {str(digest)[:12]}" if digest else ""


def tokenizer_label(identity: Optional[Mapping[str, Any]]) -> str:
    """A one-line name for messages: kind, first file, hash prefix, vocabulary size."""
    if not identity:
        return "an unknown tokenizer (no sidecar)"
    if identity.get("kind") == "mixed":
        parts = identity.get("parts") or []
        return f"mixed tokenizers ({', '.join(tokenizer_label(p) for p in parts)})"
    files = identity.get("files") or []
    where = f" {os.path.basename(str(files[0]))}" if files else ""
    return (
        f"{identity.get('kind', '?')}{where}{_short_hash(identity)} "
        f"(vocab {identity.get('vocab_size', '?')})"
    )


def vocabulary_key(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an identity that decide the vocabulary (file paths and the
    special-token settings left out): equal keys mean the ids mean the same."""
    return {k: v for k, v in identity.items() if k not in _NOT_COMPARED}


# -- inputs ---------------------------------------------------------------------------------
def _sha256_range(path: str, start: int = 0, stop: Optional[int] = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(start)
        left = None if stop is None else max(stop - start, 0)
        while left is None or left > 0:
            block = handle.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            digest.update(block)
            left = None if left is None else left - len(block)
    return digest.hexdigest()


def file_record(path: str) -> dict[str, Any]:
    """``{"kind": "file", "path", "bytes", "sha256"}`` of one input file."""
    path = os.path.abspath(os.fspath(path))
    return {
        "kind": "file",
        "path": path,
        "bytes": os.path.getsize(path),
        "sha256": _sha256_range(path),
    }


_OBJECT_SCHEMES = ("s3://", "msc://")


def _input_record(path: str) -> dict[str, Any]:
    """A file's record, or ``{"kind": "object", "path", "bytes", "etag"}`` of an object
    in object storage (its ETag identifies the content; it is not read again to hash)."""
    if not path.startswith(_OBJECT_SCHEMES):
        return file_record(path)
    from tokenloom.storage.object_file import object_identity

    return {"kind": "object", "path": path, **object_identity(path)}


def _expand(patterns: Iterable[Any]) -> list[str]:
    files: list[str] = []
    for pattern in map(os.fspath, patterns):
        if pattern.startswith(_OBJECT_SCHEMES):
            files.append(pattern)
        elif glob.has_magic(pattern):
            files.extend(sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)))
        elif os.path.isfile(pattern):
            files.append(pattern)
    return list(
        dict.fromkeys(p if p.startswith(_OBJECT_SCHEMES) else os.path.abspath(p) for p in files)
    )


def _directory_record(path: str, kind: str, **extra: Any) -> dict[str, Any]:
    digest, size = hashlib.sha256(), 0
    root = os.path.abspath(path)
    for folder, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            full = os.path.join(folder, name)
            digest.update(os.path.relpath(full, root).encode("utf-8") + b"\0")
            digest.update(_sha256_range(full).encode("ascii"))
            size += os.path.getsize(full)
    return {"kind": kind, "path": root, **extra, "bytes": size, "sha256": digest.hexdigest()}


def describe_inputs(inputs: Any) -> list[dict[str, Any]]:
    """Records of what ``preprocess`` read: files (globs expanded), a byte range of a
    file, a dataset saved to disk, a Hugging Face dataset (its cache files) or an
    iterable (its type only: the records were consumed)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if (
        isinstance(inputs, (list, tuple))
        and inputs
        and all(isinstance(item, (str, os.PathLike)) for item in inputs)
    ):
        return [_input_record(path) for path in _expand(inputs)]
    path, start, stop = (read_attribute(inputs, name, None) for name in ("path", "start", "stop"))
    if isinstance(path, str) and isinstance(start, int) and isinstance(stop, int):
        path = os.path.abspath(path)
        return [
            {
                "kind": "file_range",
                "path": path,
                "start": start,
                "stop": stop,
                "bytes": max(stop - start, 0),
                "sha256": _sha256_range(path, start, stop),
            }
        ]
    if isinstance(path, str) and os.path.isdir(path):
        return [
            _directory_record(path, "hf_disk_dataset", split=read_attribute(inputs, "split", None))
        ]
    cache_files = read_attribute(inputs, "cache_files", None)
    if isinstance(cache_files, list) and cache_files:
        return [
            {**file_record(entry["filename"]), "kind": "hf_dataset_file"}
            for entry in cache_files
            if isinstance(entry, dict) and "filename" in entry
        ]
    return [{"kind": "iterable", "type": type(inputs).__name__}]


# -- writing --------------------------------------------------------------------------------
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


# -- reading --------------------------------------------------------------------------------
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


# -- merging --------------------------------------------------------------------------------
def check_tokenizers(
    sidecars: Sequence[tuple[str, Optional[Mapping[str, Any]]]], allow_mixed: bool = False
) -> list[str]:
    """Refuse to merge pairs made by different tokenizers; return notes for the user.

    Raises ConfigError naming the first two prefixes and their tokenizers when the
    vocabularies differ, unless ``allow_mixed``.  Pairs without a sidecar cannot be
    checked: a note says so.  Different special-token settings of one vocabulary are a
    note, not an error."""
    notes = [
        f"{prefix}: no provenance sidecar (a Megatron-built pair?): its tokenizer is not checked"
        for prefix, record in sidecars
        if record is None
    ]
    notes += [
        f"{prefix}: its sidecar names no single tokenizer (a merge of unchecked "
        "pairs): its tokenizer is not checked"
        for prefix, record in sidecars
        if record is not None and not record.get("tokenizer")
    ]
    known = [
        (prefix, dict(record["tokenizer"]))
        for prefix, record in sidecars
        if record is not None and record.get("tokenizer")
    ]
    if not known:
        return notes
    first_prefix, first = known[0]
    for prefix, identity in known[1:]:
        if vocabulary_key(identity) != vocabulary_key(first):
            message = (
                f"{first_prefix} was tokenized with {tokenizer_label(first)} but {prefix} "
                f"with {tokenizer_label(identity)}"
            )
            if not allow_mixed:
                raise ConfigError(
                    f"refusing to merge: {message}; their token ids mean different "
                    "things. Pass --allow-mixed-tokenizers to merge anyway"
                )
            notes.append(f"warning: mixing tokenizers: {message}")
        else:
            notes += [
                f"note: {prefix} has {name}={identity.get(name)!r} but {first_prefix} "
                f"{first.get(name)!r}"
                for name in _SETTING_KEYS
                if identity.get(name) != first.get(name)
            ]
    return notes


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


def _merged_tokenizer(records: Sequence[Optional[Mapping[str, Any]]]) -> Optional[dict[str, Any]]:
    identities = [None if record is None else record.get("tokenizer") for record in records]
    if any(not identity for identity in identities):
        return None  # some input's tokenizer is unknown
    known = [dict(identity) for identity in identities if identity]
    if all(vocabulary_key(identity) == vocabulary_key(known[0]) for identity in known):
        return known[0]
    return {
        "kind": "mixed",
        "parts": list({json.dumps(i, sort_keys=True): i for i in known}.values()),
    }


def merged_sidecar(sidecars: Sequence[tuple[str, Optional[Mapping[str, Any]]]]) -> dict[str, bytes]:
    """The ``{".json": bytes}`` extra file of a merge of ``sidecars``' prefixes.

    Its ``tokenizer`` is None when some input has no sidecar (nothing reliable to
    record); the counts come from the pairs themselves."""
    merged_from, inputs = [], []
    totals = {"documents": 0, "sequences": 0, "tokens": 0, "bin_bytes": 0}
    for prefix, record in sidecars:
        counts = pair_counts(prefix)
        for name in totals:
            totals[name] += counts[name]
        merged_from.append(
            {
                "prefix": os.path.abspath(prefix),
                "counts": counts,
                "has_sidecar": record is not None,
                "settings": None if record is None else record.get("settings"),
            }
        )
        inputs += [] if record is None else list(record.get("inputs") or [])
    record = {
        "format": FORMAT,
        "tool": {"name": "tokenloom", "version": tool_version()},
        "tokenizer": _merged_tokenizer([record for _, record in sidecars]),
        "merged_from": merged_from,
        "inputs": inputs,
        "counts": totals,
    }
    return {SUFFIX: encode_sidecar(record)}


__all__ = [
    "FORMAT",
    "SUFFIX",
    "sidecar_path",
    "tokenizer_identity",
    "tokenizer_label",
    "vocabulary_key",
    "describe_inputs",
    "file_record",
    "encode_sidecar",
    "preprocess_sidecars",
    "read_sidecar",
    "read_sidecars",
    "stale_problems",
    "check_tokenizers",
    "merged_sidecar",
    "pair_counts",
    "tool_version",
]
