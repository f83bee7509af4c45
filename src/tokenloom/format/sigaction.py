"""A native SIGBUS handler kept first in line, chained to the one it displaced.

:class:`ChainedAction` wraps ``sigaction(2)`` through ctypes for one native handler
(a C function address, ``sa_sigaction`` with ``SA_SIGINFO``): it installs it on top of
whatever SIGBUS handler is there (Python's default, ``faulthandler``'s, torch's, ...),
keeps that one as the *previous* action, and the one found at the very first install as
the *original* action. Both are ``struct sigaction`` values at fixed addresses, which
the native handler restores by itself (see ``tokenloom.kernels.sigbus``).

Linux only (64-bit: the layout of glibc's and musl's ``struct sigaction`` on x86_64 and
aarch64, and their flag values); :func:`supported` says whether this is such a platform.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any

__all__ = ["ChainedAction", "supported", "libc_address"]

SA_SIGINFO, SA_ONSTACK, SA_NODEFER = 0x4, 0x08000000, 0x40000000
SIGBUS = int(getattr(signal, "SIGBUS", 7))


class SigAction(ctypes.Structure):
    """``struct sigaction`` on 64-bit Linux (x86_64, aarch64; glibc and musl)."""

    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


def supported() -> bool:
    """Whether this platform can run the handler (Linux, x86_64 or aarch64, 64-bit)."""
    return (
        sys.platform.startswith("linux")
        and os.uname().machine in ("x86_64", "aarch64")
        and ctypes.sizeof(ctypes.c_void_p) == 8
    )


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sigaction.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    libc.sigaction.restype = ctypes.c_int
    return libc


def libc_address(name: str) -> int:
    """The address of the C library's function ``name`` (``write``, ``raise``, ...)."""
    return int(ctypes.cast(ctypes.CDLL(None)[name], ctypes.c_void_p).value or 0)


class ChainedAction:
    """SIGBUS's action for one native handler; not thread-safe (the caller locks).

    ``previous_address`` and ``original_address`` are where the native handler finds
    the actions to restore: they never move."""

    def __init__(self) -> None:
        self.previous, self.original = SigAction(), SigAction()  # zeros: SIG_DFL
        self._have_original = False
        self._probe = SigAction()
        self._probe_pointer = ctypes.byref(self._probe)
        self._sigaction: Any = None

    @property
    def previous_address(self) -> int:
        """Address of the action the handler chains to (the one it displaced)."""
        return ctypes.addressof(self.previous)

    @property
    def original_address(self) -> int:
        """Address of the action found at the first install (restored by a second run)."""
        return ctypes.addressof(self.original)

    def current(self) -> int:
        """Address of SIGBUS's handler now (0: the default, 1: ignored; -1: unknown)."""
        if self._sigaction is None:
            self._sigaction = _libc().sigaction
        if self._sigaction(SIGBUS, None, self._probe_pointer) != 0:
            return -1
        return int(self._probe.handler or 0)

    def put_on_top(self, handler: int) -> bool:
        """Make ``handler`` SIGBUS's first handler (a no-op when it is), chaining to the
        one it displaces; whether it is first afterwards."""
        now = self.current()
        if now == handler:
            return True
        if now == -1:
            return False
        if not self._have_original:
            ctypes.memmove(
                self.original_address, ctypes.addressof(self._probe), ctypes.sizeof(SigAction)
            )
            self._have_original = True
        ours = SigAction(handler=handler, flags=SA_SIGINFO | SA_ONSTACK | SA_NODEFER)
        return bool(self._sigaction(SIGBUS, ctypes.byref(ours), ctypes.byref(self.previous)) == 0)

    def restore(self, handler: int) -> None:
        """Put the previous action back, when ``handler`` is SIGBUS's first handler."""
        if self.current() == handler:
            self._sigaction(SIGBUS, ctypes.byref(self.previous), None)
