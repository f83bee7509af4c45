"""Read-only memory maps of whole files that keep no file descriptor open.

``mmap.mmap`` keeps a ``dup()`` of the file descriptor for as long as the mapping
lives (Python < 3.13), so every mapped ``.bin``/``.idx``/``.npy`` costs one open file:
a blend of 10,000 prefixes then runs into the open-file limit. A mapping does not
need its descriptor. :func:`map_readonly` maps with ``trackfd=False`` on Python 3.13+
and, before that, calls the C library's ``mmap`` through ctypes (64-bit POSIX); the
result is a read-only ``uint8`` numpy array owning the mapping, which is unmapped when
the last array viewing it is garbage collected (so views stay valid after the reader
closes). Elsewhere it falls back to ``mmap.mmap``.

Every mapping made here is recorded in ``tokenloom.format.sigbus.REPORTER`` while it is
mapped, so that a process killed by SIGBUS on it (the file shrank under the mapping)
first names the file (see that module).

A refused mapping (``EPERM``/``ENOMEM``/``EACCES``/``ENODEV``: a filesystem's mmap
quota, ``vm.max_map_count``) is an ``OSError`` that :func:`refused` recognises; the
callers then read the file instead (:func:`map_or_read` for small files, the ``.bin``
readers by ``pread``). :data:`MAPS` counts the live mappings made here; the
environment variable ``TOKENLOOM_MMAP_QUOTA=N`` (tests, benchmarks) makes
:func:`map_readonly` refuse with ``EPERM`` past ``N`` live mappings, as such a quota does.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any, Optional, Protocol, Union

import numpy
import numpy.typing as npt

from tokenloom.attributes import read_attribute
from tokenloom.format.sigbus import REPORTER
from tokenloom.process_caches import ONE_TIME_NOTICES, register_state

__all__ = [
    "map_readonly",
    "map_array",
    "map_or_read",
    "refused",
    "warn_refused",
    "MapCount",
    "MAPS",
    "release",
    "holds_descriptor",
    "LiveMappings",
    "LIVE_MAPPINGS",
]

Buffer = Union[npt.NDArray[numpy.uint8], mmap.mmap]

#: ``mmap(addr, length, prot, flags, fd, offset)`` of the C library: the address, or None
_MapFn = Callable[[Optional[int], int, int, int, int, int], Optional[int]]
#: ``munmap(addr, length)`` of the C library
_UnmapFn = Callable[[int, int], int]


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


logger = logging.getLogger(__name__)
QUOTA_VARIABLE = "TOKENLOOM_MMAP_QUOTA"
_REFUSALS = frozenset({errno.EPERM, errno.ENOMEM, errno.EACCES, errno.ENODEV})


class MapCount:
    """How many mappings made by :func:`map_readonly` are live in this process (a
    counter; a forked child inherits the parent's mappings, so it keeps the count)."""

    def __init__(self) -> None:
        self.live = 0
        self.refused = 0

    def opened(self) -> None:
        """One more live mapping."""
        self.live += 1

    def closed(self) -> None:
        """One mapping fewer."""
        self.live -= 1

    def check_quota(self, path: object) -> None:
        """OSError(EPERM) when ``TOKENLOOM_MMAP_QUOTA`` is set and reached (simulates a
        filesystem's mmap quota)."""
        quota = os.environ.get(QUOTA_VARIABLE)
        if quota and self.live >= int(quota):
            self.refused += 1
            raise OSError(errno.EPERM, f"cannot memory-map {path}: mmap quota {quota} reached")


#: the live mappings of this process (see :class:`MapCount`)
MAPS = MapCount()


def refused(error: OSError) -> bool:
    """Whether ``error`` is a refused mapping (quota, memory), not a missing file."""
    return error.errno in _REFUSALS


def warn_refused(path: object, error: OSError, fallback: str) -> None:
    """Log once per process that a mapping was refused and files are read instead
    (later refusals at DEBUG: a blend of thousands of files would repeat it)."""
    if ONE_TIME_NOTICES.get("mmap_refused"):
        logger.debug("%s: mmap refused (%s); %s", path, error, fallback)
        return
    ONE_TIME_NOTICES.put("mmap_refused", True)
    logger.warning(
        "%s: memory-mapping refused (%s); %s. Further refused files fall back silently "
        "(lower GPTDatasetConfig(max_open_bin_files=...) or raise the filesystem's quota)",
        path,
        error,
        fallback,
    )


def _libc_mmap() -> Optional[tuple[_MapFn, _UnmapFn]]:
    """``(mmap, munmap)`` of the C library, or None where they cannot be called safely."""
    if os.name != "posix" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        map_fn, unmap_fn = libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None
    map_fn.restype = ctypes.c_void_p
    map_fn.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    )
    unmap_fn.restype = ctypes.c_int
    unmap_fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return map_fn, unmap_fn


_TRACKFD = sys.version_info >= (3, 13)
_LIBC = None if _TRACKFD else _libc_mmap()
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """Owns one mapping; numpy arrays over it (through ``__array_interface__``) keep it
    alive, and it is unmapped when the last of them is collected."""

    __slots__ = ("__array_interface__", "_address", "_size", "_unmap", "_record")

    def __init__(self, address: int, size: int, unmap: _UnmapFn, path: object) -> None:
        self._address, self._size, self._unmap = address, size, unmap
        self._record = REPORTER.register(address, size, path)
        MAPS.opened()
        self.__array_interface__ = {
            "data": (address, True),
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }

    def __del__(self) -> None:
        REPORTER.unregister(*self._record)  # before the range can be mapped again
        self._unmap(self._address, self._size)
        MAPS.closed()


def map_readonly(handle: _HasFileno, size: int) -> Buffer:
    """Map the first ``size`` (> 0) bytes of the open file ``handle`` read-only. The
    handle can be closed at once: the mapping holds no descriptor (see module doc)."""
    fd = handle.fileno()
    path = read_attribute(handle, "name", fd)
    MAPS.check_quota(path)
    if sys.version_info >= (3, 13):  # _TRACKFD, spelt so that type checkers see the version
        return _recorded(mmap.mmap(fd, size, access=mmap.ACCESS_READ, trackfd=False), path)
    if _LIBC is None:
        return _recorded(mmap.mmap(fd, size, access=mmap.ACCESS_READ), path)
    map_fn, unmap_fn = _LIBC
    address = map_fn(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot memory-map {path}: {os.strerror(error)}")
    array = numpy.asarray(_Mapping(address, size, unmap_fn, path))
    array.flags.writeable = False
    return array


def _address_of(buffer: mmap.mmap) -> int:
    view = numpy.frombuffer(buffer, dtype=numpy.uint8)
    address = int(view.ctypes.data)
    del view  # releases the export: the mmap can be closed
    return address


def _recorded(buffer: mmap.mmap, path: object) -> mmap.mmap:
    """``buffer``, recorded for the SIGBUS handler until it is collected or released."""
    if len(buffer):
        record = REPORTER.register(_address_of(buffer), len(buffer), path)
        weakref.finalize(buffer, REPORTER.unregister, *record)
        MAPS.opened()
        weakref.finalize(buffer, MAPS.closed)
    return buffer


def map_or_read(handle: _HasFileno, size: int) -> Buffer:
    """:func:`map_readonly`, or the whole file read into memory (a read-only ``uint8``
    array) when the mapping is refused (:func:`refused`): for small files (``.idx``,
    index-cache entries) whose readers need their bytes, not a mapping."""
    try:
        return map_readonly(handle, size)
    except OSError as error:
        if not refused(error):
            raise
        path = read_attribute(handle, "name", "?")
        warn_refused(path, error, "reading the file into memory instead")
    data = numpy.empty(size, dtype=numpy.uint8)
    done, fd = 0, handle.fileno()
    while done < size:
        got = os.preadv(fd, [data.data[done:]], done)
        if got <= 0:
            break
        done += got
    data.flags.writeable = False
    return data[:done]


def release(buffer: Union[Buffer, bytes]) -> None:
    """Drop a mapping made by :func:`map_readonly`: unmapped now, or once the last array
    viewing it is collected (the caller just lets go of its reference)."""
    if isinstance(buffer, mmap.mmap) and not buffer.closed:
        record = REPORTER.record_at(_address_of(buffer)) if len(buffer) else (-1, 0)
        try:
            buffer.close()
        except BufferError:
            return  # views still reference it; they keep it mapped until collected
        REPORTER.unregister(*record)


def map_array(
    path: str, dtype: npt.DTypeLike, shape: tuple[int, ...], offset: int
) -> npt.NDArray[Any]:
    """Read-only C-order array of ``dtype``/``shape`` at byte ``offset`` of ``path``
    (``numpy.memmap(path, dtype, "r", offset, shape)`` without its open descriptor)."""
    dtype = numpy.dtype(dtype)
    count = int(numpy.prod(shape, dtype=numpy.int64))
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if offset < 0 or offset + count * dtype.itemsize > size:
            raise ValueError(
                f"{path}: {size} bytes, too short for {count} x {dtype} at byte offset {offset}"
            )
        if count == 0:
            return numpy.zeros(shape, dtype=dtype)
        buffer = map_readonly(handle, size)
    return numpy.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape)


def holds_descriptor() -> bool:
    """Whether mappings made here keep a file descriptor open (only the last fallback)."""
    return not _TRACKFD and _LIBC is None


class _Rechecked(Protocol):
    def recheck_after_fork(self) -> None: ...


class LiveMappings:
    """The readers of memory-mapped files open in this process, re-checked in every
    child made by ``fork`` (a DataLoader worker): the one process-level registry of
    this module.

    It holds weak references only, so it is bounded by what is open (a closed or
    collected reader leaves it) and never keeps a mapping alive; :meth:`readers` lists
    it and :meth:`clear` empties it (tests). The fork hook takes no lock (a lock held by
    another thread at fork time would stay held in the child)."""

    def __init__(self) -> None:
        self._readers: weakref.WeakSet[_Rechecked] = weakref.WeakSet()

    def add(self, reader: _Rechecked) -> None:
        """Re-check ``reader`` after every fork while it lives (until :meth:`discard`)."""
        self._readers.add(reader)

    def discard(self, reader: _Rechecked) -> None:
        """Stop re-checking ``reader`` (it was closed)."""
        self._readers.discard(reader)

    def readers(self) -> list[_Rechecked]:
        """The live readers, in no particular order."""
        return list(self._readers)

    def clear(self) -> None:
        """Forget every reader."""
        self._readers.clear()

    def __len__(self) -> int:
        return len(self._readers)

    def recheck_after_fork(self) -> None:
        """In a new child: every live reader re-checks its file (cheap: one ``stat``)."""
        for reader in list(self._readers):
            try:
                reader.recheck_after_fork()
            except Exception:  # noqa: BLE001 - an at-fork hook must never raise
                pass


#: the readers re-checked after ``fork`` (see :class:`LiveMappings`)
LIVE_MAPPINGS = LiveMappings()
register_state(
    LIVE_MAPPINGS,
    "format._mapping: live memory-mapped readers",
    "weak references to the open readers of mapped files, re-checked in every child made "
    "by fork (nothing to reset: it holds only what is open)",
    None,
    after_fork_in_child=LIVE_MAPPINGS.recheck_after_fork,
)
register_state(
    MAPS,
    "format._mapping: the count of live mappings",
    "how many mappings made by map_readonly are live (checked against TOKENLOOM_MMAP_QUOTA); "
    "nothing to reset: it counts what is mapped",
    None,
)
