"""Loading the numba sample kernels off the critical path of the first sample.

The first numba call of a process costs about half a second (importing numba, then
loading the cached machine code), longer than megatron-core's whole warm start over
a thousand prefixes. So ``dataset[i]`` never waits for it: a background thread loads
the kernels (calling them once on the dataset's own arrays, which loads the
specialisation for its dtypes) while the general numpy path serves samples; once it
is done, :class:`~tokenloom.datasets._sample.TokenSource` hands out the kernels and
the fast path takes over. Both paths give the same samples (property-tested).

A fork while a thread holds numba's compiler lock would leave that lock held for
ever in the child (a DataLoader worker would hang at its first sample), so every
pending warm-up is joined before ``os.fork``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, List

__all__ = ["start", "synchronous", "wait"]

SYNC_ENV = "TOKENLOOM_SYNC_KERNEL_LOAD"
"""Set to 1 to load the kernels at the first sample instead (deterministic paths)."""

logger = logging.getLogger(__name__)

_PENDING: List[threading.Thread] = []
_LOCK = threading.Lock()


def synchronous() -> bool:
    """Whether ``$TOKENLOOM_SYNC_KERNEL_LOAD`` asks for loading in the caller's thread."""
    return os.environ.get(SYNC_ENV, "").strip() not in ("", "0")


def start(load: Callable[[], None]) -> None:
    """Run ``load()`` (which must catch nothing it cannot handle) in a daemon thread."""
    thread = threading.Thread(target=_run, args=(load,), name="tokenloom-kernel-warmup",
                              daemon=True)
    with _LOCK:
        _PENDING.append(thread)
    thread.start()


def _run(load: Callable[[], None]) -> None:
    try:
        load()
    except Exception:  # the general path keeps serving; nothing is lost
        logger.debug("numba sample kernels could not be loaded", exc_info=True)
    finally:
        with _LOCK:
            _PENDING[:] = [t for t in _PENDING if t is not threading.current_thread()]


def wait(timeout: float = 60.0) -> None:
    """Join every pending warm-up (each at most ``timeout`` seconds)."""
    with _LOCK:
        pending = list(_PENDING)
    for thread in pending:
        if thread is not threading.current_thread():
            thread.join(timeout)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)
