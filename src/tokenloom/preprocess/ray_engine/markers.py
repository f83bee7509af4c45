"""Completion markers of shards: what a finished shard was made from, and what it holds.

A shard's marker ``shard-00003-of-00008.done.json`` sits beside its outputs and is
written last (temporary name, then rename), after the outputs were renamed into place.
It records:

* ``settings``: a fingerprint of everything that shapes the tokens (the tokenizer's
  class, identifiers, vocabulary, EOD and pickled state, the tokenizer file's content
  hash, the keys, the policies and every other option of the local engine except
  those its output does not depend on: ``workers``, ``chunk_bytes``, ``log_interval``);
* ``inputs``: each input piece's identity (absolute path, byte range, size, mtime);
* ``outputs``: per JSON key, the ``.bin`` and ``.idx`` sizes and checksums;
* ``counts``: the shard's documents, tokens, lines and skipped records, so that the
  summary of a resumed run still adds up.

A shard is reused only when its marker parses (read bounded in size and depth by
:mod:`tokenloom.untrusted_json`), the settings fingerprint is equal, the
inputs' identities are those of the current plan, and every output file has the
recorded size and checksum (re-hashed).  Anything else re-runs the shard.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from tokenloom.atomic import atomic_write_bytes
from tokenloom.attributes import read_attribute
from tokenloom.format import get_bin_path, get_idx_path
from tokenloom.preprocess.ray_engine.plan import Shard
from tokenloom.untrusted_json import read_json_file

MARKER_FORMAT = "tokenloom-ray-shard/1"
_HASH_BLOCK = 8 << 20
_MAX_MARKER_BYTES = 64 << 20  # a marker lists a shard's pieces and files: kilobytes


def _hasher() -> tuple:
    """(name, factory) of the fastest checksum at hand."""
    try:
        import xxhash
    except ImportError:
        return "blake2b", lambda: hashlib.blake2b(digest_size=16)
    return "xxh3_128", xxhash.xxh3_128


def _factory(name: str) -> Optional[Callable[[], Any]]:
    if name == "blake2b":
        return lambda: hashlib.blake2b(digest_size=16)
    if name == "xxh3_128":
        try:
            import xxhash
        except ImportError:
            return None
        return xxhash.xxh3_128
    return None


def file_checksum(path: str, algorithm: Optional[str] = None) -> str:
    """``algorithm:hexdigest`` of a whole file (xxh3_128 where installed, else blake2b)."""
    name, factory = _hasher() if algorithm is None else (algorithm, _factory(algorithm))
    if factory is None:
        raise ValueError(f"checksum {algorithm!r} is not available here")
    digest = factory()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(_HASH_BLOCK)
            if not block:
                break
            digest.update(block)
    return f"{name}:{digest.hexdigest()}"


def _tokenizer_file_hash(tokenizer: Any) -> Optional[str]:
    identifiers = read_attribute(tokenizer, "unique_identifiers", None) or {}
    for field in ("tokenizer_path", "model_path", "path", "vocab_file", "merges_file"):
        path = identifiers.get(field) if isinstance(identifiers, Mapping) else None
        if isinstance(path, str) and os.path.isfile(path):
            return file_checksum(path, "blake2b")
    return None


# options of the local engine that do not change its output (it is the same for any value)
NEUTRAL_OPTIONS = frozenset({"workers", "chunk_bytes", "log_interval", "show_progress"})


def settings_fingerprint(tokenizer: Any, options: Mapping[str, Any]) -> str:
    """Hex digest of what shapes a shard's tokens: the tokenizer and the local engine's options
    (all but :data:`NEUTRAL_OPTIONS`)."""
    try:
        state = hashlib.sha256(pickle.dumps(tokenizer, protocol=4)).hexdigest()
    except Exception:  # an unpicklable tokenizer cannot go to Ray workers anyway
        state = type(tokenizer).__qualname__
    described = {
        "tokenizer": {
            "class": f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
            "identifiers": read_attribute(tokenizer, "unique_identifiers", None),
            "vocab_size": read_attribute(tokenizer, "vocab_size", None),
            "eod": read_attribute(tokenizer, "eod", None),
            "file": _tokenizer_file_hash(tokenizer),
            "state": state,
        },
        "options": {
            key: repr(options[key]) for key in sorted(options) if key not in NEUTRAL_OPTIONS
        },
    }
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def marker_path(workdir: str, shard: Shard) -> str:
    """Where the marker of ``shard`` lives."""
    return os.path.join(workdir, f"{shard.name}.done.json")


def output_files(prefixes: Iterable[str]) -> list:
    """The ``.bin`` and ``.idx`` paths of output prefixes, in order."""
    files = []
    for prefix in prefixes:
        files += [get_bin_path(prefix), get_idx_path(prefix)]
    return files


def write_marker(
    workdir: str, shard: Shard, settings: str, outputs: dict[str, str], counts: dict
) -> dict:
    """Checksum the published ``outputs`` (key -> prefix) and atomically write the marker."""
    files = {}
    for path in output_files(outputs.values()):
        files[os.path.basename(path)] = {
            "size": os.path.getsize(path),
            "checksum": file_checksum(path),
        }
    marker = {
        "format": MARKER_FORMAT,
        "shard": shard.name,
        "index": shard.index,
        "count": shard.count,
        "settings": settings,
        "inputs": [piece.identity() for piece in shard.pieces],
        "outputs": {key: os.path.basename(prefix) for key, prefix in outputs.items()},
        "files": files,
        "counts": counts,
    }
    data = json.dumps(marker, indent=1, sort_keys=True).encode("utf-8")
    atomic_write_bytes(marker_path(workdir, shard), data)
    return marker


def remove_marker(workdir: str, shard: Shard) -> None:
    """Forget a shard's completion (before its outputs are replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker_path(workdir, shard))


def _files_match(workdir: str, files: Mapping[str, Any]) -> bool:
    for name, expected in files.items():
        path = os.path.join(workdir, name)
        try:
            if os.path.getsize(path) != expected["size"]:
                return False
            algorithm = str(expected["checksum"]).split(":", 1)[0]
            if file_checksum(path, algorithm) != expected["checksum"]:
                return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
    return True


def reusable_marker(
    workdir: str, shard: Shard, settings: str, keys: Iterable[str]
) -> Optional[dict]:
    """The marker of ``shard`` when its outputs can be reused as they are, else None."""
    try:  # a marker too large, too deep or not a regular file is no marker (UntrustedFileError)
        marker = read_json_file(
            marker_path(workdir, shard), what="shard marker", max_bytes=_MAX_MARKER_BYTES
        )
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT:
        return None
    if marker.get("settings") != settings or marker.get("shard") != shard.name:
        return None
    if marker.get("inputs") != [piece.identity() for piece in shard.pieces]:
        return None
    outputs = marker.get("outputs")
    if not isinstance(outputs, dict) or sorted(outputs) != sorted(keys):
        return None
    files = marker.get("files")
    if not isinstance(files, dict) or len(files) != 2 * len(outputs):
        return None
    return marker if _files_match(workdir, files) else None


__all__ = [
    "MARKER_FORMAT",
    "file_checksum",
    "settings_fingerprint",
    "marker_path",
    "write_marker",
    "remove_marker",
    "reusable_marker",
    "output_files",
]
