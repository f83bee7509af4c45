"""The processes a private Ray cluster started, found and stopped through ``/proc``.

``ray.shutdown()`` stops the cluster's raylet and GCS at once, but the agents the raylet
started (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) exit only after their own
checks time out, up to a minute later.  A private cluster must leave nothing behind
when the command ends, so :func:`ray_descendants` notes the Ray processes below this
one before the shutdown and :func:`stop_processes` stops those still running after it
(by pid and start time, so that a reused pid is never hit).  Without ``/proc`` (not
Linux) both do nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

_PROC = "/proc"


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of ``pid``, or None when it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1]), fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _is_ray(pid: int) -> bool:
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as handle:
            return b"ray" in handle.read()
    except OSError:
        return False


def ray_descendants(root: int | None = None) -> dict[int, int]:
    """Pid -> start time of the live Ray processes below ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    if not os.path.isdir(_PROC):
        return {}
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir(_PROC):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[1] != "Z":
            children.setdefault(stat[0], []).append(int(entry))
            starts[int(entry)] = stat[2]
    found: dict[int, int] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if _is_ray(pid):
            found[pid] = starts[pid]
    return found


def _running(processes: dict[int, int]) -> dict[int, int]:
    alive = {}
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == start and stat[1] != "Z":
            alive[pid] = start
    return alive


def stop_processes(processes: dict[int, int], grace: float = 2.0) -> list[int]:
    """Let ``processes`` exit for ``grace`` seconds, then SIGKILL the rest; return those killed."""
    deadline = time.monotonic() + grace
    left = _running(processes)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _running(left)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return sorted(left)


__all__ = ["ray_descendants", "stop_processes"]
