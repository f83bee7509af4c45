"""Pack files: many small index-cache entries in one file.

Creating thousands of small files is the largest part of a cold build over thousands
of small prefixes. An :class:`EntryPacker` (the builder creates one per blend and hands
it to the :class:`~tokenloom.cache.store.IndexCache` its datasets store through)
queues entries up to ``small_entry_bytes`` in memory; :meth:`EntryPacker.flush` writes
them as one pack file, through one temporary file and one rename::

    <path_to_cache>/packs/<id>-pack.cache

    bytes 0-7     magic  b"TLIDXP01"
    bytes 8-15    uint64 length T of the table
    bytes 16-19   uint32 CRC32 of the table
    bytes 20-23   zero
    bytes 24-     the table: UTF-8 JSON {"format", "body_bytes", "entries": [[stem,
                  offset, length], ...]}, offsets from the body start
    body start    ``24 + T`` rounded up to 64; the file is body start + body_bytes long
    entries       each at a 64-byte aligned offset, byte for byte the entry file that
                  :meth:`IndexCache.store` would have written (own magic, header CRC,
                  description, per-array CRC32)

Finding an entry (:func:`locate`) lists ``packs/`` when that directory changed (or
could have changed unseen) since it was last listed, reads the table of each new pack
once, and serves the entry from a ``pread`` of its bytes, which are then validated
exactly like an entry file. A stem in several packs is served from the newest.
Anything wrong with a pack (bad magic, table CRC, size) makes its entries misses,
never wrong arrays. A pack or entry found damaged is forgotten (:func:`forget`) while
the file is unchanged, and warned about once: its entries are rebuilt once, into a
new pack, which later lookups find.

What this process knows of each ``packs/`` folder is a process-level cache
(:data:`tokenloom.process_caches.PACK_LISTINGS`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import time
import zlib
from stat import S_ISREG
from types import TracebackType
from typing import IO, Optional

from tokenloom.atomic import atomic_open
from tokenloom.errors import CacheError
from tokenloom.process_caches import ABSOLUTE_PATHS, PACK_LISTINGS
from tokenloom.untrusted_json import loads_json

__all__ = [
    "PACK_DIR",
    "PACK_SUFFIX",
    "SMALL_ENTRY_BYTES",
    "EntryPacker",
    "Where",
    "forget",
    "locate",
    "pack_entries",
    "read_entry",
    "read_table",
    "stems",
]

logger = logging.getLogger(__name__)

PACK_DIR = "packs"
PACK_FORMAT = "tokenloom-index-pack/1"
PACK_SUFFIX = "-pack.cache"
SMALL_ENTRY_BYTES = 1 << 20
"""Entries up to this size go into a pack (the :class:`EntryPacker` default)."""
MAX_PENDING_BYTES = 256 << 20
"""A pack is written once this much is queued (the :class:`EntryPacker` default)."""
_MAGIC = b"TLIDXP01"
_PREFIX = struct.Struct("<8sQII")
_ALIGN = 64
_RACY_NS = 2_000_000_000  # a listing this close to the directory's mtime may miss a file
_MAX_TABLE_BYTES = 256 * 1024 * 1024  # millions of entries; a longer table is damage
# a FIFO planted in packs/ must not block an open, nor a link lead to another file
_OPEN_FLAGS = os.O_RDONLY | sum(
    getattr(os, f, 0) for f in ("O_NONBLOCK", "O_NOFOLLOW", "O_CLOEXEC")
)

Where = tuple[str, int, int]
"""``(pack path, offset, length)`` of one entry."""
StatKey = tuple[int, int, int]


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def absolute(directory: str) -> str:
    """``os.path.abspath(directory)``, remembered for absolute directories."""
    known = ABSOLUTE_PATHS.get(directory)
    if known is None:
        known = os.path.abspath(directory)
        if os.path.isabs(directory):
            ABSOLUTE_PATHS.put(directory, known)
    return str(known)


# -- writing --------------------------------------------------------------------------
class EntryPacker:
    """Small entries of one cache directory, queued to be written as one pack file.

    Use it as a context manager: a normal exit writes the queued entries
    (:meth:`flush`), an exception drops them (:meth:`discard`); after the block it
    queues nothing more (entries stored later are written alone). Thread-safe.

    Args:
        path_to_cache: the cache directory.
        small_entry_bytes: entries up to this size are queued, larger ones written alone.
        max_pending_bytes: a pack is written as soon as this much is queued.
    """

    def __init__(
        self,
        path_to_cache: str,
        *,
        small_entry_bytes: int = SMALL_ENTRY_BYTES,
        max_pending_bytes: int = MAX_PENDING_BYTES,
    ) -> None:
        self.directory = absolute(os.fspath(path_to_cache))
        self.small_entry_bytes, self.max_pending_bytes = small_entry_bytes, max_pending_bytes
        self._entries: dict[str, bytes] = {}
        self._size = 0
        self._name = _new_pack_name()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> EntryPacker:
        return self

    def __exit__(
        self,
        kind: Optional[type[BaseException]],
        error: Optional[BaseException],
        trace: Optional[TracebackType],
    ) -> None:
        with self._lock:
            self._closed = True  # nothing is queued from now on
        if kind is None:
            self.flush()
        else:
            self.discard()

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, PACK_DIR, name)

    def offer(self, stem: str, data: bytes) -> Optional[str]:
        """Queue an entry's bytes when it is small: the pack path it will be written to;
        None when it is too large (the caller writes it alone)."""
        if len(data) > self.small_entry_bytes:
            return None
        full: Optional[tuple[str, dict[str, bytes]]] = None
        with self._lock:
            if self._closed:
                return None
            if self._size + len(data) > self.max_pending_bytes and self._entries:
                full = (self._name, self._entries)
                self._entries, self._size, self._name = {}, 0, _new_pack_name()
            self._entries[stem] = data
            self._size += len(data)
            path = self._path(self._name)
        if full is not None:
            self._write(*full)
        return path

    def pending(self, stem: str) -> Optional[tuple[str, bytes]]:
        """``(pack path, bytes)`` of an entry queued but not yet written, else None."""
        with self._lock:
            data = self._entries.get(stem)
            return None if data is None else (self._path(self._name), data)

    def flush(self) -> None:
        """Write the queued entries as one pack (nothing when none is queued)."""
        with self._lock:
            name, entries = self._name, self._entries
            self._entries, self._size, self._name = {}, 0, _new_pack_name()
        self._write(name, entries)

    def discard(self) -> None:
        """Drop the queued entries unwritten."""
        with self._lock:
            self._entries, self._size = {}, 0

    def _write(self, name: str, entries: dict[str, bytes]) -> None:
        if not entries:
            return
        path = self._path(name)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_open(path, "wb", durable=False) as handle:
                handle.write(pack_entries(entries))
        except OSError as error:
            raise CacheError(
                f"cannot write the index cache in {self.directory} ({error}); set "
                "path_to_cache to a writable directory"
            ) from None


def _new_pack_name() -> str:
    seed = f"{os.getpid()}-{time.time_ns()}-{os.urandom(8).hex()}"
    return hashlib.md5(seed.encode(), usedforsecurity=False).hexdigest() + PACK_SUFFIX


def pack_entries(entries: dict[str, bytes]) -> bytes:
    """The bytes of a pack file holding ``entries`` (see the module docstring)."""
    rows: list[tuple[str, int, int]] = []
    body = 0
    for stem, data in entries.items():
        rows.append((stem, body, len(data)))
        body = _aligned(body + len(data))
    body = rows[-1][1] + rows[-1][2] if rows else 0  # no padding after the last entry
    text = json.dumps(
        {"format": PACK_FORMAT, "body_bytes": body, "entries": [list(row) for row in rows]},
        separators=(",", ":"),
    ).encode()
    start = _aligned(_PREFIX.size + len(text))
    parts = [
        _PREFIX.pack(_MAGIC, len(text), zlib.crc32(text), 0),
        text,
        bytes(start - _PREFIX.size - len(text)),
    ]
    for (_, offset, length), data in zip(rows, entries.values()):
        parts.append(data)
        if offset + length < body:
            parts.append(bytes(_aligned(offset + length) - offset - length))
    return b"".join(parts)


# -- finding entries in packs ---------------------------------------------------------
class PackListing:
    """What this process knows of one ``packs/`` folder (thread-safe)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.listed: Optional[tuple[tuple[int, int], int]] = None  # (dir stat key, time)
        # path -> (stat key, {stem: (offset, length)}, or None when the pack is unusable)
        self.tables: dict[str, tuple[StatKey, Optional[dict[str, tuple[int, int]]]]] = {}
        self.damaged: dict[str, tuple[StatKey, set[str]]] = {}  # path -> (key, stems)
        self.where: dict[str, Where] = {}


def _listing(directory: str) -> PackListing:
    folder = os.path.join(absolute(directory), PACK_DIR)
    listing = PACK_LISTINGS.get(folder)
    if not isinstance(listing, PackListing):
        listing = PackListing(folder)
        PACK_LISTINGS.put(folder, listing)
    return listing


def stems(directory: str) -> list[str]:
    """The stems of every entry held by the packs of ``directory`` (listed afresh)."""
    listing = _listing(directory)
    with listing.lock:
        _relist(listing)
        return sorted(listing.where)


def locate(directory: str, stem: str) -> Optional[Where]:
    """Where ``stem`` is in the newest pack holding it, else None."""
    listing = _listing(directory)
    with listing.lock:
        where = listing.where.get(stem)
        if where is None and _stale(listing):
            _relist(listing)
            where = listing.where.get(stem)
        return where


def forget(directory: str, stem: str, where: Where, why: str) -> None:
    """Forget the damaged entry ``stem`` at ``where`` while its pack is unchanged, with a
    warning the first time: its later lookups miss (and find a rebuilt copy)."""
    listing = _listing(directory)
    path = where[0]
    try:
        stat = os.stat(path)
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # the file as it is now
    except OSError:
        key = (-1, -1, -1)
    with listing.lock:
        bad_key, bad = listing.damaged.get(path, (key, set()))
        if bad_key != key:
            bad = set()
        first = not bad
        bad.add(stem)
        listing.damaged[path] = (key, bad)
        if listing.where.get(stem) == where:
            del listing.where[stem]
        listing.listed = None  # relist at the next miss: a rebuilt copy may be elsewhere
    if first:
        logger.warning(
            "index cache pack %s is damaged (%s); its damaged entries will be "
            "rebuilt once (delete it to silence this)",
            path,
            why,
        )


def _stale(listing: PackListing) -> bool:
    try:
        stat = os.stat(listing.folder)
    except OSError:
        return False  # no packs (yet): nothing to list
    if listing.listed is None:
        return True
    key, listed_at = listing.listed
    return key != (stat.st_ino, stat.st_mtime_ns) or stat.st_mtime_ns >= listed_at - _RACY_NS


def _relist(listing: PackListing) -> None:
    listed_at = time.time_ns()
    try:
        stat = os.stat(listing.folder)
        names = [n for n in os.listdir(listing.folder) if n.endswith(PACK_SUFFIX)]
    except OSError:
        return
    found: list[tuple[StatKey, str, dict[str, tuple[int, int]]]] = []
    for name in names:
        path = os.path.join(listing.folder, name)
        table = _table(listing, path)
        if table is not None:
            found.append((table[0], path, table[1]))
    where: dict[str, Where] = {}
    for key, path, entries in sorted(found, key=lambda item: (item[0][1], item[1])):
        bad_key, bad = listing.damaged.get(path, (key, set()))
        for stem, (offset, length) in entries.items():
            if bad_key != key or stem not in bad:
                where[stem] = (path, offset, length)  # newer packs (by mtime) win
    listing.where, listing.listed = where, ((stat.st_ino, stat.st_mtime_ns), listed_at)
    present = set(os.path.join(listing.folder, name) for name in names)
    listing.tables = {p: t for p, t in listing.tables.items() if p in present}
    listing.damaged = {p: d for p, d in listing.damaged.items() if p in present}


def _table(listing: PackListing, path: str) -> Optional[tuple[StatKey, dict[str, tuple[int, int]]]]:
    """``(stat key, {stem: (offset, length)})`` of the pack at ``path``; None when it is
    gone or unusable (an unusable pack is warned about once while it is unchanged)."""
    try:
        with os.fdopen(os.open(path, _OPEN_FLAGS), "rb") as handle:
            stat = os.fstat(handle.fileno())
            key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            known = listing.tables.get(path)
            if known is not None and known[0] == key:
                return None if known[1] is None else (key, known[1])
            if S_ISREG(stat.st_mode):
                entries, why = read_table(handle, stat.st_size)
            else:
                entries, why = None, "it is not a regular file"
    except FileNotFoundError:
        return None
    except OSError as error:
        entries, why, key = None, repr(error), (-1, -1, -1)
    listing.tables[path] = (key, entries)
    if entries is None:
        logger.warning(
            "index cache pack %s is damaged (%s); its entries will be rebuilt "
            "(delete it to silence this)",
            path,
            why,
        )
        return None
    return key, entries


def read_table(handle: IO[bytes], size: int) -> tuple[Optional[dict[str, tuple[int, int]]], str]:
    """``({stem: (absolute offset, length)}, "")`` of the open pack ``handle`` of
    ``size`` bytes, or ``(None, why)`` when it is damaged."""
    read = handle.read
    try:
        magic, length, crc, _ = _PREFIX.unpack(read(_PREFIX.size))
        if length > _MAX_TABLE_BYTES:
            return None, f"its table length {length} exceeds the limit {_MAX_TABLE_BYTES}"
        text = read(length) if magic == _MAGIC and length <= size else b""
        if len(text) != length or zlib.crc32(text) != crc:
            return None, "its table fails its CRC32"
        # bounded in depth: a crafted table with a valid CRC is damaged, not a crash
        record = loads_json(text, source="the table", what="index cache pack", max_depth=8)
        start = _aligned(_PREFIX.size + length)
        body = int(record["body_bytes"])
        if record.get("format") != PACK_FORMAT or start + body != size:
            return None, f"{size} bytes, expected {start + body} (truncated?)"
        entries = {
            str(s): (start + int(o), int(n))
            for s, o, n in record["entries"]
            if 0 <= int(o) and int(o) + int(n) <= body
        }
    except (ValueError, KeyError, TypeError, struct.error) as error:
        return None, repr(error)
    return entries, ""


def read_entry(where: Where) -> bytes:
    """The bytes of the entry at ``where`` (OSError when the pack is gone or short)."""
    path, offset, length = where
    fd = os.open(path, _OPEN_FLAGS)  # a FIFO swapped in since the listing must not block
    try:
        if not S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length:
        raise OSError(f"{path}: {len(data)} bytes at {offset}, expected {length}")
    return data
