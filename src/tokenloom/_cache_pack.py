"""Pack files: many small index-cache entries in one file (``tokenloom.cache``).

A cold build over thousands of small prefixes caches one small GPT index entry per
prefix. Creating thousands of files is then the largest part of the build, and its
cost swings tenfold with the state of the disk's journal (0.02 ms to 0.6 ms a file
here). While :func:`collect_small_entries` is active for a cache directory (the
builder opens it around building the datasets of a blend), :meth:`IndexCache.store`
queues entries up to :data:`SMALL_ENTRY_BYTES` in memory instead, and leaving the
block writes them all as one pack file, through one temporary file and one rename::

    <path_to_cache>/packs/<id>-pack.cache

    bytes 0-7     magic  b"TLIDXP01"
    bytes 8-15    uint64 length T of the table
    bytes 16-19   uint32 CRC32 of the table
    bytes 20-23   zero
    bytes 24-     the table: UTF-8 JSON {"format", "body_bytes", "entries": [[stem,
                  offset, length], ...]}, offsets from the body start
    body start    ``24 + T`` rounded up to 64; the file is body start + body_bytes long
    entries       each at a 64-byte aligned offset, byte for byte the entry file
                  that :meth:`IndexCache.store` would have written (own magic, header
                  CRC, description, per-array CRC32)

A lookup whose entry file is missing asks :func:`locate`: it lists ``packs/`` when that
directory changed (or could have changed unseen) since it was last listed, reads the
table of each new pack once, and serves the entry from a ``pread`` of its bytes, which
are then validated exactly like an entry file. A stem in several packs is served from
the newest. Anything wrong with a pack (bad magic, table CRC, size) makes its entries
misses, never wrong arrays: the caller rebuilds them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import threading
import time
import zlib
from typing import Dict, Iterator, List, Optional, Tuple

from tokenloom._atomic import atomic_open

__all__ = ["PACK_DIR", "SMALL_ENTRY_BYTES", "active", "collect_small_entries", "queue",
           "pending",
           "locate", "read_entry", "pack_entries"]

PACK_DIR = "packs"
PACK_FORMAT = "tokenloom-index-pack/1"
PACK_SUFFIX = "-pack.cache"
SMALL_ENTRY_BYTES = 1 << 20
"""Entries up to this size go into a pack while a collector is active."""
_MAX_PENDING_BYTES = 256 << 20  # a pack is written once this much is queued
_MAGIC = b"TLIDXP01"
_PREFIX = struct.Struct("<8sQII")
_ALIGN = 64
_RACY_NS = 2_000_000_000  # a listing this close to the directory's mtime may miss a file

_LOCK = threading.Lock()
logger = logging.getLogger(__name__)


class _Collector:
    """Entries queued for one cache directory: ``{stem: bytes}`` and their pack's name."""

    def __init__(self, directory: str) -> None:
        self.directory, self.depth = directory, 1
        self.entries: Dict[str, bytes] = {}
        self.size = 0
        self.name = self._new_name()

    @staticmethod
    def _new_name() -> str:
        seed = f"{os.getpid()}-{time.time_ns()}-{os.urandom(8).hex()}"
        return hashlib.md5(seed.encode(), usedforsecurity=False).hexdigest() + PACK_SUFFIX

    def path(self) -> str:
        return os.path.join(self.directory, PACK_DIR, self.name)


_COLLECTORS: Dict[str, _Collector] = {}


_ABSOLUTE: Dict[str, str] = {}


def _key(directory: str) -> str:
    """``os.path.abspath(directory)``, remembered (called on every store and miss)."""
    absolute = _ABSOLUTE.get(directory)
    if absolute is None:
        absolute = os.path.abspath(directory)
        if len(_ABSOLUTE) < 4096 and os.path.isabs(directory):
            _ABSOLUTE[directory] = absolute
    return absolute


@contextlib.contextmanager
def collect_small_entries(directory: Optional[str]) -> Iterator[None]:
    """Queue small entries stored in ``directory`` and write them as one pack on a normal
    exit (nothing is written on an exception; nested blocks share the outer one)."""
    if not directory:
        yield
        return
    key = _key(directory)
    with _LOCK:
        collector = _COLLECTORS.get(key)
        if collector is None:
            collector = _COLLECTORS[key] = _Collector(key)
        else:
            collector.depth += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        with _LOCK:
            collector.depth -= 1
            last = collector.depth == 0
            if last:
                del _COLLECTORS[key]
        if last and ok:
            _flush(collector)


def active(directory: str) -> bool:
    """Whether small entries stored in ``directory`` are being collected."""
    return bool(_COLLECTORS) and _key(directory) in _COLLECTORS


def queue(directory: str, stem: str, data: bytes) -> Optional[str]:
    """Queue an entry's bytes if a collector is active for ``directory`` and the entry is
    small; return the pack path it will be written to, else None (write it alone)."""
    if len(data) > SMALL_ENTRY_BYTES:
        return None
    flush = None
    with _LOCK:
        collector = _COLLECTORS.get(_key(directory))
        if collector is None:
            return None
        if collector.size + len(data) > _MAX_PENDING_BYTES and collector.entries:
            flush = _Collector(collector.directory)
            flush.entries, flush.name = collector.entries, collector.name
            collector.entries, collector.size, collector.name = {}, 0, collector._new_name()
        collector.entries[stem] = data
        collector.size += len(data)
        path = collector.path()
    if flush is not None:
        _flush(flush)
    return path


def pending(directory: str, stem: str) -> Optional[Tuple[str, bytes]]:
    """``(pack path, bytes)`` of an entry queued but not yet written, else None."""
    with _LOCK:
        collector = _COLLECTORS.get(_key(directory))
        if collector is None or stem not in collector.entries:
            return None
        return collector.path(), collector.entries[stem]


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def pack_entries(entries: Dict[str, bytes]) -> bytes:
    """The bytes of a pack file holding ``entries`` (see the module docstring)."""
    rows, body = [], 0
    for stem, data in entries.items():
        rows.append([stem, body, len(data)])
        body = _aligned(body + len(data))
    body = rows[-1][1] + rows[-1][2] if rows else 0  # no padding after the last entry
    text = json.dumps({"format": PACK_FORMAT, "body_bytes": body, "entries": rows},
                      separators=(",", ":")).encode()
    start = _aligned(_PREFIX.size + len(text))
    parts = [_PREFIX.pack(_MAGIC, len(text), zlib.crc32(text), 0), text,
             bytes(start - _PREFIX.size - len(text))]
    for (stem, offset, length), data in zip(rows, entries.values()):
        parts.append(data)
        if offset + length < body:
            parts.append(bytes(_aligned(offset + length) - offset - length))
    return b"".join(parts)


def _flush(collector: _Collector) -> None:
    from tokenloom.errors import CacheError

    if not collector.entries:
        return
    path = collector.path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_open(path, "wb", durable=False) as handle:
            handle.write(pack_entries(collector.entries))
    except OSError as error:
        raise CacheError(
            f"cannot write the index cache in {collector.directory} ({error}); set "
            "path_to_cache to a writable directory") from None


def stems(directory: str) -> List[str]:
    """The stems of every entry held by the packs of ``directory`` (listed afresh)."""
    folder = os.path.join(_key(directory), PACK_DIR)
    with _LOCK:
        packs = _PACKS.setdefault(folder, _Packs())
        _relist(packs, folder)
        return sorted(packs.where)


# -- finding entries in packs ---------------------------------------------------------
class _Packs:
    """What this process knows of one directory's ``packs/``: stem -> (path, offset, n)."""

    def __init__(self) -> None:
        self.listed: Optional[tuple] = None  # (dir stat key, listing time)
        self.tables: Dict[str, Tuple[tuple, Dict[str, Tuple[int, int]]]] = {}
        self.where: Dict[str, Tuple[str, int, int]] = {}


_PACKS: Dict[str, _Packs] = {}


def locate(directory: str, stem: str) -> Optional[Tuple[str, int, int]]:
    """``(pack path, offset, length)`` of ``stem`` in the newest pack holding it, else None."""
    folder = os.path.join(_key(directory), PACK_DIR)
    with _LOCK:
        packs = _PACKS.setdefault(folder, _Packs())
        where = packs.where.get(stem)
        if where is None and _stale(packs, folder):
            _relist(packs, folder)
            where = packs.where.get(stem)
        return where


def _stale(packs: _Packs, folder: str) -> bool:
    try:
        stat = os.stat(folder)
    except OSError:
        return False  # no packs (yet): nothing to list
    if packs.listed is None:
        return True
    key, listed_at = packs.listed
    return key != (stat.st_ino, stat.st_mtime_ns) or stat.st_mtime_ns >= listed_at - _RACY_NS


def _relist(packs: _Packs, folder: str) -> None:
    listed_at = time.time_ns()
    try:
        stat = os.stat(folder)
        names = [n for n in os.listdir(folder) if n.endswith(PACK_SUFFIX)]
    except OSError:
        return
    found = []
    for name in names:
        path = os.path.join(folder, name)
        table = _table(packs, path)
        if table is not None:
            found.append((table[0], path, table[1]))
    where: Dict[str, Tuple[str, int, int]] = {}
    for _, path, entries in sorted(found, key=lambda item: (item[0][1], item[1])):
        for stem, (offset, length) in entries.items():
            where[stem] = (path, offset, length)  # newer packs (by mtime) win
    packs.where, packs.listed = where, ((stat.st_ino, stat.st_mtime_ns), listed_at)
    packs.tables = {path: packs.tables[path] for _, path, _ in found}


def _table(packs: _Packs, path: str):
    """``(stat key, {stem: (offset, length)})`` of the pack at ``path``; None if unusable."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            known = packs.tables.get(path)
            if known is not None and known[0] == key:
                return known
            magic, length, crc, _ = _PREFIX.unpack(handle.read(_PREFIX.size))
            text = handle.read(length) if magic == _MAGIC and length <= stat.st_size else b""
        if len(text) != length or zlib.crc32(text) != crc:
            return _unusable(path, "its table fails its CRC32")
        record = json.loads(text)
        start = _aligned(_PREFIX.size + length)
        body = int(record["body_bytes"])
        if record.get("format") != PACK_FORMAT or start + body != stat.st_size:
            return _unusable(path, f"{stat.st_size} bytes, expected {start + body} (truncated?)")
        entries = {str(s): (start + int(o), int(n)) for s, o, n in record["entries"]
                   if 0 <= int(o) and int(o) + int(n) <= body}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
        return _unusable(path, repr(error))
    packs.tables[path] = (key, entries)
    return packs.tables[path]


def _unusable(path: str, why: str) -> None:
    logger.warning("index cache pack %s is damaged (%s); its entries will be rebuilt "
                   "(delete it to silence this)", path, why)
    return None


def read_entry(where: Tuple[str, int, int]) -> bytes:
    """The bytes of the entry at ``where`` (OSError when the pack is gone or short)."""
    path, offset, length = where
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length:
        raise OSError(f"{path}: {len(data)} bytes at {offset}, expected {length}")
    return data
