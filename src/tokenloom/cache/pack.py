"""Pack files: many small index-cache entries in one file.

Creating thousands of small files is the largest part of a cold build over thousands
of small prefixes. An :class:`EntryPacker` (the builder creates one per blend and hands
it to the :class:`~tokenloom.cache.store.IndexCache` its datasets store through)
queues entries up to ``small_entry_bytes`` in memory; :meth:`EntryPacker.flush` writes
them as one pack file (its layout: :mod:`tokenloom.cache.pack_format`), through one
temporary file and one rename, as ``<path_to_cache>/packs/<id>-pack.cache``.

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
import logging
import os
import threading
import time
from stat import S_ISREG
from types import TracebackType
from typing import Optional

from tokenloom.atomic import atomic_open
from tokenloom.cache.pack_format import (
    OPEN_FLAGS,
    PACK_DIR,
    PACK_SUFFIX,
    Where,
    pack_entries,
    read_entry,
    read_table,
    read_where,
)
from tokenloom.errors import CacheError
from tokenloom.process_caches import ABSOLUTE_PATHS, PACK_LISTINGS

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
    "read_where",
    "stems",
]

logger = logging.getLogger(__name__)

SMALL_ENTRY_BYTES = 1 << 20
"""Entries up to this size go into a pack (the :class:`EntryPacker` default)."""
MAX_PENDING_BYTES = 256 << 20
"""A pack is written once this much is queued (the :class:`EntryPacker` default)."""
_RACY_NS = 2_000_000_000  # a listing this close to the directory's mtime may miss a file

StatKey = tuple[int, int, int]


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
        self._pack = self._path(_new_pack_name())  # the pack being filled
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
                full = (self._pack, self._entries)
                self._entries, self._size, self._pack = {}, 0, self._path(_new_pack_name())
            self._entries[stem] = data
            self._size += len(data)
            path = self._pack
        if full is not None:
            self._write(*full)
        return path

    def pending(self, stem: str) -> Optional[tuple[str, bytes]]:
        """``(pack path, bytes)`` of an entry queued but not yet written, else None."""
        with self._lock:
            data = self._entries.get(stem)
            return None if data is None else (self._pack, data)

    def flush(self) -> None:
        """Write the queued entries as one pack (nothing when none is queued)."""
        with self._lock:
            path, entries = self._pack, self._entries
            self._entries, self._size, self._pack = {}, 0, self._path(_new_pack_name())
        self._write(path, entries)

    def discard(self) -> None:
        """Drop the queued entries unwritten."""
        with self._lock:
            self._entries, self._size = {}, 0

    def _write(self, path: str, entries: dict[str, bytes]) -> None:
        if not entries:
            return
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


# -- finding entries in packs ---------------------------------------------------------
class PackListing:
    """What this process knows of one ``packs/`` folder (thread-safe)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.listed: Optional[tuple[tuple[int, int], int]] = None  # (dir stat key, time)
        # path -> (stat key, {stem: where}, or None when the pack is unusable)
        self.tables: dict[str, tuple[StatKey, Optional[dict[str, Where]]]] = {}
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
    if not os.access(listing.folder, os.F_OK):  # no exception to raise for every miss
        return False  # no packs (yet): nothing to list
    try:
        stat = os.stat(listing.folder)
    except OSError:
        return False  # removed since
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
    found: list[tuple[StatKey, str, dict[str, Where]]] = []
    for name in names:
        path = os.path.join(listing.folder, name)
        table = _table(listing, path)
        if table is not None:
            found.append((table[0], path, table[1]))
    where: dict[str, Where] = {}
    for key, path, entries in sorted(found, key=lambda item: (item[0][1], item[1])):
        bad_key, bad = listing.damaged.get(path, (key, set()))
        if bad_key != key or not bad:
            where.update(entries)  # newer packs (by mtime) win
        else:
            where.update((s, w) for s, w in entries.items() if s not in bad)
    listing.where, listing.listed = where, ((stat.st_ino, stat.st_mtime_ns), listed_at)
    present = set(os.path.join(listing.folder, name) for name in names)
    listing.tables = {p: t for p, t in listing.tables.items() if p in present}
    listing.damaged = {p: d for p, d in listing.damaged.items() if p in present}


def _table(listing: PackListing, path: str) -> Optional[tuple[StatKey, dict[str, Where]]]:
    """``(stat key, {stem: where})`` of the pack at ``path``; None when it is
    gone or unusable (an unusable pack is warned about once while it is unchanged)."""
    try:
        with os.fdopen(os.open(path, OPEN_FLAGS), "rb") as handle:
            stat = os.fstat(handle.fileno())
            key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            known = listing.tables.get(path)
            if known is not None and known[0] == key:
                return None if known[1] is None else (key, known[1])
            if S_ISREG(stat.st_mode):
                entries, why = read_where(handle, stat.st_size, path)
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
