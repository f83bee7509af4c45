"""The ``inputs`` records of a sidecar: what ``preprocess`` read, with sizes and hashes.

Files (globs expanded) and byte ranges of a file are hashed with SHA-256; an object in
object storage is recorded by its ETag (not read again); a dataset saved to disk by a
digest of its files; a Hugging Face dataset by its cache files; an iterable by its type.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterable
from typing import Any, Optional

from tokenloom.attributes import read_attribute

__all__ = ["describe_inputs", "file_record"]

_OBJECT_SCHEMES = ("s3://", "msc://")


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
