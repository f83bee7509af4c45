"""Exit at once while the kernel loader's thread still compiles: :data:`GUARD`.

The loader's thread is a daemon and nothing joins it at exit: a compile still running
when the process's work is done is abandoned (the next process that needs the kernel
compiles it again, into numba's cache). Python stops such a thread the next time it
asks for the GIL, which is harmless in Python code, but two instants of a compile must
not be cut:

1. a call into LLVM (native code, run without the GIL, so finalization does not stop
   it; the process would tear LLVM's globals down under it);
2. numba's write of a cache entry: an index file, then a data file, each written to a
   temporary name and renamed; a thread stopped between the two leaves an index that
   names a data file which is missing (recompiled: harmless) or stale (left by an
   older version of the kernel: its machine code would be loaded).

:class:`ExitGuard` sees both through public hooks: llvmlite runs a callback before and
after every LLVM call (``llvmlite.binding.ffi.register_lock_callback``), and numba
signals the end of a compile (its cache write follows) and each release of its
compiler lock (the write has ended; ``numba.core.event``). At exit,
:meth:`ExitGuard.close` marks the process as exiting and waits for the threads inside
either instant to leave it (one LLVM call or one cache write: milliseconds, at most
``EXIT_WAIT_S``); a thread that reaches one of them afterwards stops there, holding
LLVM's or numba's lock, until Python's finalization freezes it (at most ``PARK_S``).

A process killed at any instant (SIGKILL, a crash) is not covered: numba's temporary
names and renames keep each file whole, and the second case is then numba's own.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["EXIT_WAIT_S", "GUARD", "PARK_S", "ExitGuard"]

EXIT_WAIT_S = 5.0
"""The longest that :meth:`ExitGuard.close` waits for a thread to leave an LLVM call or a
cache write (one call or write: milliseconds; a bound, never expected)."""

PARK_S = 2.0
"""How long a thread stopped by the guard waits before it goes on. Python's finalization
starts milliseconds after the guard closes (the last exit hooks), and a stopped thread
that wakes then is frozen by Python before it runs on; meanwhile it holds LLVM's (or
numba's) lock, so an exit hook that needs LLVM waits at most this long."""

logger = logging.getLogger(__name__)


class ExitGuard:
    """Tracks the threads inside an LLVM call or a numba cache write, and stops them at
    the next one (for ``park_s`` seconds at most) once the process exits. Thread-safe;
    :meth:`install` is idempotent."""

    def __init__(self, park_s: float = PARK_S) -> None:
        self.park_s = park_s
        self._cond = threading.Condition()
        self._inside: dict[int, int] = {}  # thread -> depth of LLVM calls (reentrant)
        self._saving: set[int] = set()  # threads between a compile's end and the write's
        self._parked: set[int] = set()
        self._closing = False
        self._closer: Optional[int] = None
        self._llvm = self._numba = False
        # not ``_cond``: importing numba calls into LLVM, whose hook takes ``_cond``
        self._installing = threading.Lock()

    def install(self) -> None:
        """Hook into llvmlite (imported here when installed) and into numba once it is
        imported (never imported here: it costs a third of a second); cheap once done."""
        if self._llvm and self._numba:
            return
        with self._installing:
            if not self._llvm:
                self._llvm = self._hook_llvm()
            if not self._numba:
                self._numba = self._hook_numba()

    def after_fork(self) -> None:
        """In a new child: only this thread exists; fresh locks (another thread may
        have held one at fork)."""
        self._cond = threading.Condition()
        self._installing = threading.Lock()
        self._inside, self._saving, self._parked = {}, set(), set()

    def _hook_llvm(self) -> bool:
        try:
            from llvmlite.binding import ffi
        except ImportError:
            return False
        ffi.register_lock_callback(self._enter_llvm, self._leave_llvm)
        return True

    def _hook_numba(self) -> bool:
        event = sys.modules.get("numba.core.event")
        if event is None:
            return False

        listener: Any = event.Listener  # numba is untyped

        class OnEnd(listener):  # type: ignore[misc]
            """Calls ``callback()`` at the end of each event of its kind."""

            def __init__(self, callback: Callable[[], None]) -> None:
                self.callback = callback

            def on_start(self, _: object) -> None:
                """Nothing: only ends matter."""

            def on_end(self, _: object) -> None:
                """The event ended."""
                self.callback()

        event.register("numba:compile", OnEnd(self._compiled))
        event.register("numba:compiler_lock", OnEnd(self._unlocked))
        return True

    # -- the hooks (run in the compiling thread) --------------------------------------
    def _enter_llvm(self) -> None:
        with self._cond:
            self._stop_if_closing()
            me = threading.get_ident()
            self._inside[me] = self._inside.get(me, 0) + 1

    def _leave_llvm(self) -> None:
        with self._cond:
            me = threading.get_ident()
            depth = self._inside.pop(me, 1) - 1
            if depth > 0:
                self._inside[me] = depth
            self._cond.notify_all()

    def _compiled(self) -> None:
        """A compile ended: numba writes its cache entry next, under its compiler lock."""
        with self._cond:
            self._stop_if_closing()
            self._saving.add(threading.get_ident())

    def _unlocked(self) -> None:
        """numba released its compiler lock: a cache write of this thread is over."""
        with self._cond:
            self._saving.discard(threading.get_ident())
            self._cond.notify_all()

    def _stop_if_closing(self) -> None:
        """Once the process exits, stop every thread but the exiting one here (the
        caller holds ``self._cond``)."""
        me = threading.get_ident()
        if not self._closing or me == self._closer:
            return
        self._parked.add(me)
        self._cond.notify_all()
        until = time.monotonic() + self.park_s
        while self._closing and (left := until - time.monotonic()) > 0:
            self._cond.wait(left)
        self._parked.discard(me)

    # -- exit ---------------------------------------------------------------------------
    def busy(self) -> bool:
        """Whether another thread is inside an LLVM call or a numba cache write now."""
        with self._cond:
            return bool(self._busy_threads())

    def stopped(self) -> int:
        """How many threads the guard holds stopped now (after :meth:`close`)."""
        with self._cond:
            return len(self._parked)

    def _busy_threads(self) -> set[int]:
        threads = (set(self._inside) | self._saving) - self._parked
        threads.discard(threading.get_ident())
        return threads

    def close(self, timeout: float = EXIT_WAIT_S) -> bool:
        """The process exits: wait (at most ``timeout`` seconds) until no other thread
        is inside an LLVM call or a cache write, and stop every thread at its next one;
        whether none was left inside."""
        with self._cond:
            self._closing, self._closer = True, threading.get_ident()
            until = time.monotonic() + timeout
            while self._busy_threads() and (left := until - time.monotonic()) > 0:
                self._cond.wait(left)
            left_inside = self._busy_threads()
        if left_inside:
            logger.debug("exiting with a kernel compile inside LLVM or a cache write")
        return not left_inside

    def reopen(self) -> None:
        """Undo :meth:`close` (tests): threads run through the hooks again."""
        with self._cond:
            self._closing, self._closer = False, None
            self._cond.notify_all()


GUARD = ExitGuard()
"""The process's exit guard (installed by the kernel loader; closed at exit)."""
