"""Wait for a condition, never for a time: the one polling loop of the tests.

A test that needs something to have happened (a process gone, a file written, a worker
busy) calls :func:`wait_until` with the condition and a deadline, instead of sleeping
"long enough". The wait ends as soon as the condition holds, so it costs nothing on an
idle machine and still passes on a loaded one; at the deadline it fails the test naming
what never happened.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Optional, TypeVar

import pytest

T = TypeVar("T")


def poll(condition: Callable[[], T], timeout: float, interval: float = 0.01) -> Optional[T]:
    """Call ``condition`` until it returns something true; return that, or ``None`` at
    the deadline (``timeout`` seconds from now), looking every ``interval`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.01) -> T:
    """Like :func:`poll`, but fail the test naming ``what`` if the deadline passes."""
    value = poll(condition, timeout, interval)
    if not value:
        pytest.fail(f"{what}: still not so after {timeout} s")
    return value


def gone(pid: int) -> bool:
    """True when process ``pid`` has exited whole: it is absent, or a zombie left to reap
    whose threads have all ended and whose files (sockets included) are closed.

    A zombie state alone is not enough: the leader thread of a multi-threaded process
    turns zombie while its other threads may still hold the files open.
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state != "Z":
        return False
    try:
        return not os.listdir(f"/proc/{pid}/fd") and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def wait_for_newer_mtime(path: str, timeout: float = 10) -> None:
    """Until a file written now gets a later modification time than ``path``'s.

    File-system timestamps are coarse (a clock tick of a few milliseconds): a file
    rewritten in place at once may keep its size, inode and times, and so look
    unchanged to anything that remembers files by their ``stat``.
    """
    old = os.stat(path).st_mtime_ns
    probe = f"{path}.mtime-probe"

    def later() -> bool:
        with open(probe, "wb"):
            pass
        return os.stat(probe).st_mtime_ns > old

    try:
        wait_until(later, timeout, f"a file written after {path} has a later mtime")
    finally:
        os.unlink(probe)
