"""Name the file before a process dies of SIGBUS on a memory-mapped file that shrank.

A file truncated (or rewritten) in place while it is memory-mapped cannot serve the
pages past its new end: a read there raises SIGBUS in the reading thread, in the
middle of a numpy copy or a numba kernel. Python cannot handle it (a Python signal
handler runs only after the faulting instruction returns, which it never does), so
the process dies and, by default, says nothing. tokenloom checks sizes where it can
(at open, after ``fork``, before tail reads: ``bin_readers.MMapBinReader``); this
module covers the rest: the process still dies by SIGBUS, but first writes one line
naming the file, e.g.::

    tokenloom: SIGBUS reading /data/x_text_document.bin (memory-mapped with 256000
    bytes; the file shrank under the mapping: it was truncated or rewritten in place)...

How: :data:`REPORTER` keeps a table of the live mappings made by
``format._mapping.map_readonly`` (address range, path, size at open) in memory
allocated once, which a native signal handler reads without Python: a C function
compiled at run time by LLVM (``format.sigbus_handler``). On SIGBUS at an address
inside a mapped file it writes the line to fd 2 with ``write(2)``, restores the handler
that was there before (Python's default, ``faulthandler``'s when the user enabled it,
torch's, ...) and returns, so that the fault fires again into that one: the exit status
stays "killed by SIGBUS" and faulthandler still prints its traceback after the line. A
SIGBUS elsewhere (no mapped file at that address, or one sent by ``kill``) passes
through unchanged.

When: the first mapping asks for the handler, which is compiled and installed in the
kernel loader's background thread (``KERNELS.join()`` waits for it; :func:`install`
installs now). Every later mapping checks (one ``sigaction`` call) that the handler is
still the first one and puts it back on top when someone replaced it
(``faulthandler.enable()`` after the first open), chaining to the one it displaced. A
torch DataLoader worker installs torch's own SIGBUS handler when it starts (its line
blames shared memory): ``worker_init_fn=lambda worker: tokenloom.format.sigbus.install()``
puts tokenloom's back on top of it there.

Where: Linux on x86_64 and aarch64 (the layouts of ``siginfo_t`` and ``struct
sigaction`` used here: ``format.sigaction``), with llvmlite (numba's backend, installed
with it). Elsewhere, or with ``TOKENLOOM_DISABLE_NUMBA`` set (no compiled code at all),
nothing is installed and a SIGBUS is as silent as before (``faulthandler``, if enabled,
prints its traceback); with ``TOKENLOOM_SIGBUS_HANDLER=0`` (read at the first mapping)
nothing is recorded either.

Costs (``benchmarks/bench_sigbus.py``; numbers in docs/reliability.md): nothing on the
read path; each mapping made and dropped writes and clears one table row and checks the
handler (microseconds); the table is reserved once (32 MiB of address space, touched
only row by row: 512 bytes per live mapping); the handler is compiled once per process,
in the background (llvmlite's import, shared with numba's, and milliseconds of LLVM).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from typing import Optional

import numpy
import numpy.typing as npt

from tokenloom.format.sigaction import ChainedAction, libc_address, supported
from tokenloom.format.sigbus_handler import (
    CAPACITY,
    END,
    FIRED,
    HEADER,
    HEADER_LENGTH,
    HIGH,
    LENGTH,
    ORIGINAL,
    PREVIOUS,
    RAISE,
    ROOT_WORDS,
    ROW_BYTES,
    ROWS,
    SIGACTION,
    START,
    SUFFIX,
    SUFFIX_LENGTH,
    TEXT_BYTES,
    TEXT_OFFSET,
    WRITE,
    compile_handler,
)
from tokenloom.process_caches import register_state

__all__ = ["ENABLE_ENV", "REPORTER", "SigbusReporter", "install", "supported"]

logger = logging.getLogger(__name__)

ENABLE_ENV = "TOKENLOOM_SIGBUS_HANDLER"
"""Environment variable: ``0`` (or ``false``/``no``/``off``) installs no handler and
records no mapping."""

DEFAULT_CAPACITY = 1 << 16

_HEADER = b"tokenloom: SIGBUS reading "
_SUFFIX = (
    b"; the file shrank under the mapping: it was truncated or rewritten in place). "
    b"Publish new data under a new name or by rename (as tokenloom's writers do), or read "
    b"with mmap_bin_files=False (IndexedDataset(mmap=False)) to get an error naming the "
    b"file instead of this crash.\n"
)


_PACK = struct.Struct("=3q").pack  # START, END, LENGTH in the machine's order
_NO_RANGE = bytes(16)  # START and END of a free row


def _enabled() -> bool:
    value = os.environ.get(ENABLE_ENV, "").strip().lower()
    return value not in ("0", "false", "no", "off")


class SigbusReporter:
    """The table of live mappings that the native SIGBUS handler reads, and the
    handler's installation: the one instance is :data:`REPORTER`.

    Bounded (``capacity`` rows; mappings beyond it are not named), cleared by
    :meth:`clear`, fork-safe (a child inherits the table with the mappings, and gets a
    new lock). Only :meth:`register` and :meth:`unregister` run per mapping."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = int(capacity)
        self.root: npt.NDArray[numpy.int64] = numpy.zeros(ROOT_WORDS, dtype=numpy.int64)
        self._lock = threading.Lock()
        self._rows: Optional[npt.NDArray[numpy.uint8]] = None
        self._bytes = memoryview(b"")  # the rows' bytes, for one-copy writes
        self._keep: list[object] = []  # what the root points to, kept alive
        self._free: list[int] = []  # rows given back, reused first
        self._fresh = 0  # rows from here on were never used
        self._owners: dict[int, int] = {}  # row in use -> the serial of its registration
        self._serial = 0
        self._disabled: Optional[bool] = None  # decided at the first mapping
        self._action = ChainedAction()
        self._code: Optional[tuple[int, object]] = None  # the handler: address, its owner
        self._handler = 0  # the handler's address while tokenloom wants it first
        self._requested = False  # the background install was asked for
        self._stopped = False  # uninstalled: no background install, no putting back

    @property
    def root_address(self) -> int:
        """Address of the root words (never moves)."""
        return int(self.root.ctypes.data)

    # -- the table ---------------------------------------------------------------------
    def _allocate(self) -> bool:
        """Reserve the table once (zeroed pages: committed row by row as they fill)."""
        if self._rows is not None:
            return True
        if self._disabled is None:
            self._disabled = not (supported() and _enabled())
        if self._disabled:
            return False
        rows = numpy.zeros((self.capacity, ROW_BYTES), dtype=numpy.uint8)
        header = numpy.frombuffer(_HEADER, dtype=numpy.uint8).copy()
        suffix = numpy.frombuffer(_SUFFIX, dtype=numpy.uint8).copy()
        self._keep = [rows, header, suffix]
        root = self.root
        root[CAPACITY] = self.capacity
        root[ROWS] = rows.ctypes.data
        root[HEADER], root[HEADER_LENGTH] = header.ctypes.data, header.size
        root[SUFFIX], root[SUFFIX_LENGTH] = suffix.ctypes.data, suffix.size
        root[PREVIOUS] = self._action.previous_address
        root[ORIGINAL] = self._action.original_address
        self._bytes, self._rows = memoryview(rows.reshape(-1).data), rows
        return True

    def register(self, address: int, size: int, path: object) -> tuple[int, int]:
        """Record the mapping of ``size`` bytes of ``path`` at ``address``; returns the
        ``(row, serial)`` to pass to :meth:`unregister`, ``(-1, 0)`` when not recorded
        (disabled, unsupported, or the table is full). The first call asks for the
        handler; later ones keep it SIGBUS's first handler."""
        if self._disabled:
            return -1, 0
        text = _row_text(size, path)
        with self._lock:
            if self._rows is None and not self._allocate():
                return -1, 0
            row = self._free.pop() if self._free else self._fresh
            if row >= self.capacity:
                return -1, 0
            self._serial += 1
            self._owners[row] = serial = self._serial
            self._write_row(row, address, size, text)
            first, self._requested = not self._requested, True
            if self._handler and not first:
                self._stay_first()
        if first:
            from tokenloom.kernels import KERNELS

            KERNELS.submit(self._install_quietly)
        return row, serial

    def _write_row(self, row: int, address: int, size: int, text: bytes) -> None:
        """Fill a free row (one copy: nothing reads the new range before it is returned,
        and a row is given back only before its range is unmapped)."""
        start = row * ROW_BYTES
        self._bytes[start : start + TEXT_OFFSET + len(text)] = (
            _PACK(address, address + size, len(text)) + text
        )
        if row == self._fresh:
            self._fresh = row + 1
            self.root[HIGH] = self._fresh

    def unregister(self, row: int, serial: int) -> None:
        """Forget the mapping recorded as ``(row, serial)`` (before it is unmapped);
        a no-op when that row was cleared or reused since."""
        if row < 0:
            return
        with self._lock:
            if self._rows is None or self._owners.get(row) != serial:
                return
            start = row * ROW_BYTES
            self._bytes[start : start + len(_NO_RANGE)] = _NO_RANGE
            del self._owners[row]
            self._free.append(row)

    def record_at(self, address: int) -> tuple[int, int]:
        """The ``(row, serial)`` of the mapping recorded at ``address`` (for a caller
        that lost it), ``(-1, 0)`` when none is."""
        ranges = self._ranges()
        hits = numpy.flatnonzero(ranges[:, START] == address) if ranges is not None else ()
        for row in hits:
            with self._lock:
                serial = self._owners.get(int(row))
            if serial is not None and address:
                return int(row), serial
        return -1, 0

    def describe(self, address: int) -> Optional[str]:
        """The text the handler writes for a SIGBUS at ``address``, or None (its
        readable twin)."""
        ranges = self._ranges()
        if ranges is None or self._rows is None:
            return None
        hits = numpy.flatnonzero((ranges[:, START] <= address) & (address < ranges[:, END]))
        if not hits.size:
            return None
        row = int(hits[0])
        body = self._rows[row, TEXT_OFFSET : TEXT_OFFSET + int(ranges[row, LENGTH])].tobytes()
        return (_HEADER + body + _SUFFIX).decode(errors="replace")

    def _ranges(self) -> Optional[npt.NDArray[numpy.int64]]:
        """The int64 columns of the rows that may be in use (a view)."""
        if self._rows is None:
            return None
        high = int(self.root[HIGH])
        return self._rows[:high, :TEXT_OFFSET].view(numpy.int64)

    def __len__(self) -> int:
        """Mappings recorded now."""
        return len(self._owners)

    def clear(self) -> None:
        """Forget every mapping (their SIGBUS is then silent; the handler stays)."""
        with self._lock:
            if self._rows is not None:
                self._rows[: int(self.root[HIGH])] = 0
                self.root[HIGH] = 0
                self._owners.clear()
                self._free, self._fresh = [], 0

    def after_fork(self) -> None:
        """In a new child: a fresh lock (another thread may have held it at fork)."""
        self._lock = threading.Lock()

    # -- the handler -------------------------------------------------------------------
    def installed(self) -> bool:
        """Whether tokenloom's handler is SIGBUS's first handler now."""
        return bool(self._handler) and self._action.current() == self._handler

    def install(self) -> bool:
        """Install the handler now (compiled first, once per process), or put it back
        on top; whether it is SIGBUS's first handler afterwards. False, and nothing
        changed, where it cannot run (see the module doc)."""
        from tokenloom.kernels import numba_disabled

        if not (supported() and _enabled()) or numba_disabled():
            return False
        if self._code is None:
            try:
                self._code = compile_handler(self.root_address)
            except Exception:  # noqa: BLE001 - no llvmlite, or LLVM failed: stay silent
                logger.debug("the SIGBUS handler could not be compiled", exc_info=True)
                return False
        with self._lock:
            if not self._allocate():
                return False
            for word, name in ((WRITE, "write"), (RAISE, "raise"), (SIGACTION, "sigaction")):
                self.root[word] = libc_address(name)
            self._stopped, self._handler = False, self._code[0]
            self.root[FIRED] = 0
            return self._action.put_on_top(self._handler)

    def _stay_first(self) -> None:
        """Put the handler back on top if someone replaced it (the caller holds the lock)."""
        try:
            self._action.put_on_top(self._handler)
        except Exception:  # noqa: BLE001 - naming files is best effort, never an error
            logger.debug("could not keep the SIGBUS handler first", exc_info=True)

    def _install_quietly(self) -> None:
        try:
            if not self._stopped:
                self.install()
        except Exception:  # noqa: BLE001 - naming files is best effort, never an error
            logger.debug("the SIGBUS handler could not be installed", exc_info=True)

    def uninstall(self) -> None:
        """Restore the handler that was there before (when tokenloom's is first) and
        stop putting it back (until :meth:`install`); mappings stay recorded."""
        with self._lock:
            self._stopped = True
            if self._handler:
                self._action.restore(self._handler)
            self._handler = 0


def _row_text(size: int, path: object) -> bytes:
    """A row's text: the path (its tail, when too long) and the size at open."""
    name = path if isinstance(path, (str, bytes)) else f"fd {path}"
    tail = f" (memory-mapped with {int(size)} bytes"
    text = (os.fsdecode(name) + tail).encode(errors="surrogateescape")
    if len(text) <= TEXT_BYTES:
        return text
    room = TEXT_BYTES - len(tail) - 3  # keep the end of the path: the file's name
    return b"..." + os.fsencode(name)[-room:] + tail.encode()


REPORTER = SigbusReporter()
"""The process's table of live mappings and its SIGBUS handler."""

register_state(
    REPORTER,
    "format.sigbus: the SIGBUS reporter",
    "the table of live mappings that the native SIGBUS handler reads, and the handler "
    "(nothing to reset: it holds only what is mapped; clear() forgets the mappings)",
    None,
    after_fork_in_child=REPORTER.after_fork,
)


def install() -> bool:
    """Install tokenloom's SIGBUS handler now, or put it back on top of the one there
    (e.g. in a torch DataLoader ``worker_init_fn``, after torch installed its own);
    whether it is SIGBUS's first handler afterwards."""
    return REPORTER.install()
