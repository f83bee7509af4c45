"""``IndexCache``: a directory of cached index arrays, looked up by :class:`CacheKey`.

``IndexCache(path_to_cache, packer=None)``
    ``.entry_path(key)`` (also ``.description_path(key)``, the commit marker: the entry
    file or the pack holding the entry, and ``.paths(key, names) -> {name: path}``);
    ``.exists(key, names) -> bool``: the entry is present (cheap, no validation);
    ``.lookup(key, names, mmap=True, verify="checksum", checks=None,
    on_corrupt="miss") -> {name: ndarray} | None``: ``None`` on a miss (no entry, or
    ``checks`` differ from those stored); a corrupt or truncated entry is a miss
    (``on_corrupt="miss"``, the caller rebuilds) or a
    :class:`~tokenloom.errors.CacheError` (``on_corrupt="raise"``);
    ``.probe(key, names, ...) -> (arrays | None, present)``: ``lookup`` that also says
    whether a missed entry is present (damaged or stale), looking once when it is absent;
    ``.load(...)``: like ``lookup`` but a miss raises ``CacheError`` naming the path;
    ``.store(key, arrays, checks=None) -> {name: path}``: writes the entry through one
    temporary file and one rename, or, with a ``packer``
    (:class:`~tokenloom.cache.pack.EntryPacker`), queues a small entry for its pack.
    Not fsynced: a cache is rebuildable and every load checks the header CRC, the
    description against the key, the arrays' extents and the file size (and the
    arrays' CRC32s with ``verify="checksum"``), so a torn file is a miss, never used;
    ``.lazy(key, names, verify="size", checks=None) -> LazyArrays``: arrays mapped at
    first ``lazy[name]`` access.

``verify`` levels: ``"size"`` checks everything but the arrays' bytes; ``"checksum"``
also checks their CRC32s. Mapped arrays hold no file descriptor. The cache knows
nothing about ranks: callers decide who builds and who waits; a rank that finds no
cache gets ``None``/``CacheError``, never a hang.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Optional, Union

import numpy

from tokenloom.atomic import atomic_write_bytes
from tokenloom.cache import entry, pack
from tokenloom.cache.keys import CacheKey
from tokenloom.errors import CacheError

__all__ = ["ENTRY_SUFFIX", "IndexCache", "LazyArrays"]

ENTRY_SUFFIX = "indices.cache"
Arrays = dict[str, numpy.ndarray]


class IndexCache:
    """A directory of cached index arrays; see the module docstring for the API.

    Args:
        path_to_cache: the directory.
        packer: where small entries go instead of files of their own (the builder
            passes one per blend); None writes every entry as its own file.
    """

    def __init__(
        self, path_to_cache: Union[str, os.PathLike[str]], packer: Optional[pack.EntryPacker] = None
    ) -> None:
        self.path_to_cache = os.fspath(path_to_cache)
        self.packer = packer

    def __repr__(self) -> str:
        return f"IndexCache({self.path_to_cache!r})"

    def __getstate__(self) -> dict[str, object]:
        return {"path_to_cache": self.path_to_cache, "packer": None}  # a packer stays home

    def entry_path(self, key: CacheKey) -> str:
        """The one file holding the entry of ``key``: description and arrays."""
        return os.path.join(self.path_to_cache, f"{key.stem}-{ENTRY_SUFFIX}")

    def _packed(self, key: CacheKey) -> tuple[Optional[tuple[str, bytes]], Optional[pack.Where]]:
        """``(queued (pack, bytes), None)``, ``(None, where in a pack)`` or ``(None, None)``."""
        queued = None if self.packer is None else self.packer.pending(key.stem)
        if queued is not None:
            return queued, None
        return None, pack.locate(self.path_to_cache, key.stem)

    def description_path(self, key: CacheKey) -> str:
        """The commit marker of an entry: its file, or the pack file holding it."""
        path = self.entry_path(key)
        if os.path.isfile(path):
            return path
        queued, where = self._packed(key)
        if queued is not None:
            return queued[0]
        return path if where is None else where[0]

    def paths(self, key: CacheKey, names: Iterable[str]) -> dict[str, str]:
        """Where each array lives: all in the entry file."""
        return {name: self.entry_path(key) for name in names}

    def stems(self) -> list[str]:
        """The stems of every entry in the directory: entry files and pack entries."""
        try:
            names = os.listdir(self.path_to_cache)
        except OSError:
            return []
        suffix = f"-{ENTRY_SUFFIX}"
        files = {n[: -len(suffix)] for n in names if n.endswith(suffix)}
        return sorted(files.union(pack.stems(self.path_to_cache)))

    def exists(self, key: CacheKey, names: Iterable[str] = ()) -> bool:
        """Whether an entry of ``key`` is present (not validated)."""
        if os.path.isfile(self.entry_path(key)):
            return True
        queued, where = self._packed(key)
        return queued is not None or where is not None

    def lookup(
        self,
        key: CacheKey,
        names: Iterable[str],
        *,
        mmap: bool = True,
        verify: str = "checksum",
        checks: Optional[Mapping[str, object]] = None,
        on_corrupt: str = "miss",
    ) -> Optional[Arrays]:
        """The cached arrays, or ``None`` on a miss; see the module docstring."""
        return self._find(key, names, mmap, verify, checks, on_corrupt)[0]

    def probe(
        self,
        key: CacheKey,
        names: Iterable[str],
        *,
        mmap: bool = True,
        verify: str = "checksum",
        checks: Optional[Mapping[str, object]] = None,
        on_corrupt: str = "miss",
    ) -> tuple[Optional[Arrays], bool]:
        """``(arrays, True)`` on a hit, ``(None, whether an entry is present)`` on a miss:
        :meth:`lookup`, then :meth:`exists` on a miss, but an absent entry is looked for
        once (a present one is damaged or stale)."""
        arrays, absent = self._find(key, names, mmap, verify, checks, on_corrupt)
        if arrays is not None:
            return arrays, True
        return None, not absent and self.exists(key, names)

    def _find(
        self,
        key: CacheKey,
        names: Iterable[str],
        mmap: bool,
        verify: str,
        checks: Optional[Mapping[str, object]],
        on_corrupt: str,
    ) -> tuple[Optional[Arrays], bool]:
        """:meth:`lookup`'s arrays, and whether no entry of ``key`` was found at all."""
        if verify not in ("size", "checksum") or on_corrupt not in ("miss", "raise"):
            raise ValueError(f"verify={verify!r}/on_corrupt={on_corrupt!r} not supported")
        path = self.entry_path(key)
        try:
            try:
                handle = _open_entry(path)
            except FileNotFoundError:
                return self._lookup_packed(key, names, verify, checks, on_corrupt)
            with handle:
                return entry.read_entry(handle, path, key, names, mmap, verify, checks), False
        except (OSError, entry.Corrupt) as error:
            _unusable(error, path, path, on_corrupt)
            return None, False

    def _lookup_packed(
        self,
        key: CacheKey,
        names: Iterable[str],
        verify: str,
        checks: Optional[Mapping[str, object]],
        on_corrupt: str,
    ) -> tuple[Optional[Arrays], bool]:
        """:meth:`_find` of an entry held by a pack file (or queued for one)."""
        queued, where = self._packed(key)
        if queued is None and where is None:
            return None, True
        pack_path = queued[0] if queued is not None else where[0]  # type: ignore[index]
        path = f"{pack_path} (entry {key.stem})"
        try:
            data = queued[1] if queued is not None else pack.read_entry(where)  # type: ignore[arg-type]
            found = entry.read_entry(io.BytesIO(data), path, key, names, True, verify, checks, data)
            return found, False
        except (OSError, entry.Corrupt) as error:
            if where is not None:
                pack.forget(self.path_to_cache, key.stem, where, str(error))
            _unusable(error, path, pack_path, on_corrupt)
            return None, False

    def load(
        self,
        key: CacheKey,
        names: Iterable[str],
        *,
        mmap: bool = True,
        verify: str = "checksum",
        checks: Optional[Mapping[str, object]] = None,
        on_corrupt: str = "raise",
    ) -> Arrays:
        """Like :meth:`lookup` (corruption raises), but a miss raises CacheError too."""
        arrays = self.lookup(
            key, list(names), mmap=mmap, verify=verify, checks=checks, on_corrupt=on_corrupt
        )
        if arrays is None:
            raise CacheError(
                f"index cache not found: {self.entry_path(key)} is missing or stale; build it "
                "first (tokenloom prepare-cache, or let one rank build it) or check path_to_cache"
            )
        return arrays

    def store(
        self,
        key: CacheKey,
        arrays: Mapping[str, numpy.ndarray],
        checks: Optional[Mapping[str, object]] = None,
    ) -> dict[str, str]:
        """Write the description and every array to the entry (atomically)."""
        record = entry.entry_record(key, checks)
        try:
            # an entry larger than the packer takes is streamed to its file: its bytes
            # in memory would double the peak (and ``b"".join`` triple it)
            array_bytes = sum(int(numpy.asarray(a).nbytes) for a in arrays.values())
            if self.packer is not None and array_bytes <= self.packer.small_entry_bytes:
                data = entry.entry_bytes(record, arrays)
                packed = self.packer.offer(key.stem, data)
                if packed is not None:
                    return {**{name: packed for name in arrays}, "description": packed}
                atomic_write_bytes(self.entry_path(key), data, durable=False)
            else:
                entry.write_entry(self.entry_path(key), record, arrays)
        except OSError as error:
            raise CacheError(
                f"cannot write the index cache in {self.path_to_cache} ({error}); set "
                "path_to_cache to a writable directory"
            ) from None
        return {**self.paths(key, arrays), "description": self.entry_path(key)}

    def lazy(
        self,
        key: CacheKey,
        names: Iterable[str],
        verify: str = "size",
        checks: Optional[Mapping[str, object]] = None,
    ) -> LazyArrays:
        """The arrays of ``key``, loaded (``verify``) at the first ``lazy[name]``."""
        return LazyArrays(self, key, tuple(names), verify, checks)


_ENTRY_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as an entry must not block the open
    | getattr(os, "O_NOFOLLOW", 0)  # nor a link lead to a file tokenloom did not write
    | getattr(os, "O_CLOEXEC", 0)
)


def _open_entry(path: str) -> io.BufferedReader:
    """The entry file at ``path`` opened for reading; Corrupt (a damaged entry) when it is
    a symbolic link, a FIFO, a device or a directory: tokenloom writes regular files."""
    try:
        fd = os.open(path, _ENTRY_FLAGS)  # a missing entry raises before a file object is made
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise entry.Corrupt(f"{path}: a symbolic link, not an entry file") from None
        if error.errno == errno.EISDIR:
            raise entry.Corrupt(f"{path}: not a regular file (a directory)") from None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        handle = open(fd, "rb") if regular else None
    except BaseException:
        os.close(fd)
        raise
    if handle is None:
        os.close(fd)
        raise entry.Corrupt(f"{path}: not a regular file")
    return handle


def _unusable(error: Exception, path: str, delete: str, on_corrupt: str) -> None:
    """A damaged or unreadable entry: a miss, or (``on_corrupt="raise"``) a CacheError
    saying to delete ``delete``."""
    problem = (
        error
        if isinstance(error, entry.Corrupt)
        else entry.Corrupt(f"{path}: unreadable ({error})")
    )
    if on_corrupt == "raise":
        raise CacheError(f"{problem}; delete {delete} and rebuild") from None


class LazyArrays:
    """Cached arrays mmapped on first access (``lazy["sample_index"]``)."""

    def __init__(
        self,
        cache: IndexCache,
        key: CacheKey,
        names: tuple[str, ...],
        verify: str,
        checks: Optional[Mapping[str, object]] = None,
    ) -> None:
        self.cache, self.key, self.names, self.verify = cache, key, names, verify
        self.checks = dict(checks) if checks else None
        self._arrays: Optional[Arrays] = None

    @property
    def loaded(self) -> bool:
        """Whether the entry's arrays have been read yet."""
        return self._arrays is not None

    def __getitem__(self, name: str) -> numpy.ndarray:
        if self._arrays is None:
            self._arrays = self.cache.load(
                self.key, self.names, verify=self.verify, checks=self.checks
            )
        return self._arrays[name]

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_arrays"] = None  # workers re-mmap on their own first access
        return state
