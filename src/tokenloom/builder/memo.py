"""The start-up memo: facts about a blend's files, reused while the files are unchanged.

Opening a blend of thousands of prefixes spends most of its time learning facts that
rarely change: each ``.idx`` header (dtype, sequence and document counts), the digest
that :func:`tokenloom.format.identity.file_identity` puts in the cache keys, and how
many samples each cached GPT index holds. The builder records them in one file per
blend, ``<path_to_cache>/<md5>-startup-memo.json``, and a later start reads that one
file and ``stat``\\ s each ``.idx``/``.bin`` instead of opening, hashing and loading
every prefix.

What is recorded, and why reusing it is safe:

* ``files``: per absolute ``.idx`` path, its ``stat`` identity (size, ``mtime_ns``,
  ``ctime_ns``, inode) and the facts read from it. They are reused only while all four
  are unchanged: rewriting a file changes its mtime and ctime (restoring the mtime with
  ``os.utime`` changes the ctime), regenerating it under the same path changes its inode
  or times. A file modified less than :data:`RACY_WINDOW_NS` before it was looked at
  is never recorded (a second write within one timestamp tick could leave its stat
  unchanged; this is git's "racily clean" rule). The ``.bin`` is stat'ed live at every
  start (its size and mtime are part of the cache key; its content shapes no index).
  The digest is stored with the name of its algorithm and used only under the same one.
* ``lengths``: samples per GPT cache stem. A stem is the hash of every input that
  shapes the indices, so the length is a function of the stem and never goes stale.

The file starts with a line ``tokenloom-startup-memo/2 <md5 of the rest>``; a memo that
is truncated, edited, unreadable, too large or too deeply nested
(:mod:`tokenloom.untrusted_json`) is ignored with a warning and rewritten, never used.
Writes are atomic (temporary file, then rename). Everything here is an optimisation:
with no memo, or a miss, datasets are opened and keyed in full.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Optional

from tokenloom.atomic import atomic_write_bytes
from tokenloom.errors import UntrustedFileError
from tokenloom.format.identity import DIGEST_NAME, stat_key
from tokenloom.format.lazy import PairFacts
from tokenloom.untrusted_json import loads_json, read_bounded

__all__ = ["MEMO_FORMAT", "RACY_WINDOW_NS", "StartupMemo", "memo_path", "recordable"]

logger = logging.getLogger(__name__)

MEMO_FORMAT = "tokenloom-startup-memo/2"
RACY_WINDOW_NS = 2_000_000_000
"""Files modified this recently (ns) are not recorded: their stat may not yet be unique."""
Row = list[object]
MAX_MEMO_BYTES = 256 * 1024 * 1024
"""A longer memo (several million prefixes) is ignored: read bounded, like every file."""


def memo_path(
    path_to_cache: str, class_name: str, prefixes: Iterable[str], *, absolute: bool = False
) -> str:
    """Where the memo of a blend of ``prefixes`` (built as ``class_name``) lives
    (``absolute``: the prefixes are already ``os.path.abspath``'s results)."""
    absolute_ = list(prefixes) if absolute else [os.path.abspath(p) for p in prefixes]
    text = json.dumps([class_name, absolute_])
    digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
    return os.path.join(path_to_cache, f"{digest}-startup-memo.json")


def recordable(stat: os.stat_result) -> bool:
    """Whether a file with ``stat`` is old enough to be told apart by its stat later."""
    newest = max(stat.st_mtime_ns, stat.st_ctime_ns)
    return newest <= time.time_ns() - RACY_WINDOW_NS


def idx_path(prefix: str, absolute_prefix: Optional[str]) -> str:
    """``os.path.abspath(prefix + ".idx")``, from ``abspath(prefix)`` when that is known:
    normalising never touches a last component other than "", "." or "..", so
    appending ".idx" to such a component commutes with ``abspath``."""
    if absolute_prefix is None:
        return os.path.abspath(prefix + ".idx")
    last = prefix[prefix.rfind("/") + 1 :] if type(prefix) is str else os.path.basename(prefix)
    if last in ("", ".", ".."):  # (a str's basename: what follows its last "/")
        return os.path.abspath(prefix + ".idx")
    return absolute_prefix + ".idx"


def _row(facts: PairFacts) -> Row:
    return [
        *facts.idx_stat,
        facts.dtype_code,
        facts.sequence_count,
        facts.document_count,
        f"{DIGEST_NAME}:{facts.idx_digest}",
    ]


_ROW_TYPES = [int] * 7 + [str]


def _facts(prefix: str, path: str, row: object, bin_stat: os.stat_result) -> PairFacts:
    if type(row) is not list or list(map(type, row)) != _ROW_TYPES:
        raise ValueError(f"malformed entry {row!r}")
    name, _, digest = row[7].partition(":")
    if name != DIGEST_NAME:
        raise ValueError(f"digest by {name}, not {DIGEST_NAME}")
    size, mtime, ctime, inode, dtype_code, sequences, documents = row[:7]
    return PairFacts(
        prefix,
        path,
        (size, mtime, ctime, inode),
        dtype_code,
        sequences,
        documents,
        digest,
        bin_stat.st_size,
        bin_stat.st_mtime_ns,
    )


class StartupMemo:
    """The memo of one blend: load it, look facts up, record new ones, save if changed.

    Args:
        path: the memo file.
        absolute: ``{prefix: os.path.abspath(prefix)}`` already computed (optional).
    """

    def __init__(self, path: str, absolute: Optional[dict[str, str]] = None) -> None:
        self.path = path
        self._files: dict[str, Row] = {}
        self._lengths: dict[str, int] = {}
        self._dirty = False
        self._lock = threading.Lock()
        self._absolute = dict(absolute or {})

    @classmethod
    def load(cls, path: str, absolute: Optional[dict[str, str]] = None) -> StartupMemo:
        """The memo at ``path``; empty when absent, and (with a warning) when corrupt."""
        memo = cls(path, absolute)
        try:
            data = read_bounded(path, what="start-up memo", max_bytes=MAX_MEMO_BYTES)
        except FileNotFoundError:
            return memo
        except OSError as error:
            logger.warning("start-up memo %s is unreadable (%s); ignoring it", path, error)
            return memo
        except UntrustedFileError as error:  # not a regular file, or too large
            logger.warning("start-up memo %s is unusable (%s); ignoring it", path, error)
            memo._dirty = True
            return memo
        try:
            memo._files, memo._lengths = _parse(data, path)
        except (ValueError, KeyError, TypeError) as error:
            logger.warning(
                "start-up memo %s is corrupt (%s); ignoring it, it will be rewritten", path, error
            )
            memo._dirty = True
        return memo

    # -- lookups -------------------------------------------------------------------
    def facts(self, prefix: str) -> Optional[PairFacts]:
        """The recorded facts of ``prefix`` if its ``.idx`` is unchanged, else None."""
        path = idx_path(prefix, self._absolute.get(prefix))
        row = self._files.get(path)
        if row is None:
            return None
        try:
            if list(stat_key(os.stat(path))) != row[:4]:
                return None
            return _facts(prefix, path, row, os.stat(prefix + ".bin"))
        except (OSError, ValueError):
            return None

    def length(self, stem: str) -> Optional[int]:
        """Samples of the GPT index cached under ``stem``, when recorded."""
        return self._lengths.get(stem)

    def recorded_rows(self) -> dict[str, Row]:
        """The recorded rows by absolute ``.idx`` path (a copy)."""
        with self._lock:
            return dict(self._files)

    # -- recording -----------------------------------------------------------------
    def record_facts(self, facts: PairFacts) -> None:
        """Record ``facts`` (checked by the caller: read from an unchanged, not too recent
        ``.idx``)."""
        row = _row(facts)
        with self._lock:
            if self._files.get(facts.idx_path) != row:
                self._files[facts.idx_path] = row
                self._dirty = True

    def record_length(self, stem: str, length: int) -> None:
        """Record the length of the entry ``stem`` (marks the memo dirty if it changed)."""
        with self._lock:
            if self._lengths.get(stem) != int(length):
                self._lengths[stem] = int(length)
                self._dirty = True

    def save(self) -> None:
        """Write the memo atomically if anything was recorded; failures only warn."""
        if not self._dirty:
            return
        with self._lock:
            body = json.dumps(
                {"files": self._files, "lengths": self._lengths}, separators=(",", ":")
            ).encode("utf-8")
            self._dirty = False
        head = f"{MEMO_FORMAT} {hashlib.md5(body, usedforsecurity=False).hexdigest()}\n"
        try:
            atomic_write_bytes(self.path, head.encode("ascii") + body, durable=False)
        except OSError as error:
            logger.warning(
                "could not write the start-up memo %s (%s); the next start will "
                "open every prefix again",
                self.path,
                error,
            )


def _parse(data: bytes, path: str) -> tuple[dict[str, Row], dict[str, int]]:
    head, _, body = data.partition(b"\n")
    fields = head.decode("ascii").split(" ")
    if len(fields) != 2 or fields[0] != MEMO_FORMAT:
        raise ValueError(f"first line is not '{MEMO_FORMAT} <md5>'")
    if hashlib.md5(body, usedforsecurity=False).hexdigest() != fields[1]:
        raise ValueError("checksum mismatch (truncated or edited)")
    record = loads_json(body, source=path, what="start-up memo", max_bytes=MAX_MEMO_BYTES)
    files, lengths = record["files"], record["lengths"]
    if (
        not isinstance(files, dict)
        or not isinstance(lengths, dict)
        or not all(isinstance(n, int) and n >= 0 for n in lengths.values())
    ):
        raise ValueError("'files' and 'lengths' must be mappings")
    return files, lengths
