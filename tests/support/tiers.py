"""The test tiers (tests/conftest.py wires them in; CONTRIBUTING.md, "Tests", says what
each covers and takes).

* ``quick``: every test without one of :data:`HEAVY_MARKERS`: in this process, without
  child processes, servers, clusters or megatron-core. :class:`ChildProcesses` holds
  that rule: a quick test that started a process fails, asking for the mark.
* the default tier: every test not marked ``slow``;
* ``slow``: long by nature; run with the rest by CI.
"""

from __future__ import annotations

import os
import resource

HEAVY_MARKERS = frozenset({"slow", "processes", "distributed", "megatron", "ray", "s3"})
"""A test with any of these marks is not in the quick tier."""


_HELPERS = (b"multiprocessing.forkserver", b"multiprocessing.resource_tracker")
"""multiprocessing's long-lived helpers: started by whichever test first needs them, so
they are not blamed on it (the workers a forkserver forks are its children, not ours)."""


def _helper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as command:
            line = command.read()
    except OSError:
        return False
    return any(name in line for name in _HELPERS)


def _live_children() -> set[int]:
    pids: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux: only the reaped children are seen
        return pids
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as children:
                pids.update(int(pid) for pid in children.read().split())
        except OSError:
            continue
    return pids


class ChildProcesses:
    """Whether child processes were started between :meth:`__init__` and :meth:`started`.

    A child seen alive at the end, or reaped in between: every process takes page
    faults, which ``getrusage(RUSAGE_CHILDREN)`` adds up once the child is reaped.
    """

    def __init__(self) -> None:
        self._alive = _live_children()
        self._faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt

    def started(self) -> bool:
        faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        started = [pid for pid in _live_children() - self._alive if not _helper(pid)]
        return faults != self._faults or bool(started)
