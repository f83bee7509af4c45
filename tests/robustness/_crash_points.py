"""Run a function in a forked child and kill (or freeze) it at its n-th filesystem step.

A step is one call of an ``os`` function that changes or syncs the filesystem
(open, replace, rename, unlink, fsync, fchmod, close, mkdir) or a builtin ``open``.
The child dies by a real SIGKILL (no ``finally`` block, no atexit, like the OOM
killer), or stops with SIGSTOP so that another process can run in the middle.
"""

from __future__ import annotations

import builtins
import os
import signal
import traceback
from collections.abc import Callable
from typing import Optional

STEP_FUNCTIONS = (
    "open",
    "replace",
    "rename",
    "unlink",
    "remove",
    "fsync",
    "fchmod",
    "close",
    "mkdir",
    "makedirs",
)
_DONE, _FAILED = 0, 3


def _install(at_step: int, action: Callable[[], None], counter: list) -> None:
    def wrap(real):
        def step(*args, **kwargs):
            counter[0] += 1
            if counter[0] == at_step:
                action()
            return real(*args, **kwargs)

        return step

    for name in STEP_FUNCTIONS:
        setattr(os, name, wrap(getattr(os, name)))
    builtins.open = wrap(builtins.open)


def fork_at_step(
    fn: Callable[[], None], at_step: int, action: str, count_file: Optional[str] = None
) -> int:
    """Fork; the child runs ``fn`` and performs ``action`` ("kill" or "stop") just before
    its ``at_step``-th step (never, for 0).  Returns the child's pid.  With
    ``count_file`` the child writes how many steps it took there on success."""
    pid = os.fork()
    if pid:
        return pid
    code = _FAILED
    try:
        counter = [0]
        me = os.getpid()
        sig = signal.SIGKILL if action == "kill" else signal.SIGSTOP
        _install(at_step, lambda: os.kill(me, sig), counter)
        fn()
        code = _DONE
        if count_file is not None:
            total = counter[0]
            with open(count_file, "w") as handle:
                handle.write(str(total))
    except BaseException:  # reported through the exit code (and stderr)
        traceback.print_exc()
        code = _FAILED
    finally:
        os._exit(code)


def wait(pid: int) -> int:
    """Exit code of a child, or minus the signal that killed it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def wait_stopped(pid: int) -> bool:
    """Wait until the child stops (True) or ends (False)."""
    _, status = os.waitpid(pid, os.WUNTRACED)
    return os.WIFSTOPPED(status)


def count_steps(fn: Callable[[], None], count_file: str) -> int:
    """How many steps ``fn`` takes when nothing interrupts it."""
    pid = fork_at_step(fn, 0, "kill", count_file)
    code = wait(pid)
    if code != _DONE:
        raise RuntimeError(f"the uninterrupted run failed with exit code {code}")
    with open(count_file) as handle:
        return int(handle.read())
