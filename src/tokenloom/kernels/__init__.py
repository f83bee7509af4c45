"""Every numba kernel of tokenloom, behind one loader: :data:`KERNELS`.

The kernel modules of this package (``sample_index``, ``blend_scan``, ``blend_fast``,
``shuffle``, ``batch``, ``permutation``, ``bijection``, ``ranges``) import numba at their top and
are never imported directly: callers ask ``KERNELS.get(name)``, which returns the
module, or ``None`` when the readable reference path must run instead. That happens when

* ``TOKENLOOM_DISABLE_NUMBA`` is set to anything but ``""``/``"0"`` (read here and
  nowhere else, at every call, so tests and users may flip it at run time); or
* numba cannot be imported or cannot compile (not installed, broken, no writable cache
  location): the loader then warns exactly once per process and the references run.

Compiled machine code is cached on disk by numba (``cache=True``): next to the
modules in ``__pycache__`` when the install directory is writable, else in numba's
user-wide cache directory (``$XDG_CACHE_HOME/numba``, default ``~/.cache/numba``);
``NUMBA_CACHE_DIR`` overrides both. ``tokenloom warmup`` fills that cache ahead of
time (for container images). :func:`cache_locations` says where it goes.

Background loading: :meth:`KernelLoader.submit` runs a loading task (import a module,
call a kernel once so that its machine code is loaded) in one worker thread, so that
the first sample does not wait for numba. Its life cycle:

1. started by the first :meth:`~KernelLoader.submit` (one daemon thread, which exits
   once its queue is empty; a later ``submit`` starts a new one);
2. joined before every ``os.fork``: a child must never inherit numba's compiler lock
   held by a thread that does not exist in it; and joined on demand by
   :meth:`~KernelLoader.join` (a reader that needs the kernel now waits for it);
3. stopped by :meth:`~KernelLoader.stop`: pending tasks finish, and later ones run at
   once in the caller's thread (``tokenloom warmup``);
4. never waited for at interpreter exit (:meth:`~KernelLoader.exit`): queued tasks are
   dropped and a compile still running is abandoned, so a process whose work is done
   exits at once. :data:`tokenloom.kernels.shutdown.GUARD` keeps the exit out of an LLVM
   call and out of numba's cache write; the next process that needs the kernel compiles
   it again, into the cache.

The loader and the guard are process state registered in :mod:`tokenloom.process_caches`
(its fork and exit hooks run them); ``clear_process_caches()`` calls
:meth:`~KernelLoader.clear`.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import logging
import os
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, Optional

from tokenloom.attributes import has_attribute, read_attribute
from tokenloom.kernels.shutdown import GUARD, ExitGuard
from tokenloom.process_caches import register_state

__all__ = [
    "DISABLE_ENV",
    "KERNEL_MODULES",
    "KERNELS",
    "KernelLoader",
    "cache_locations",
    "compiled_entry",
    "numba_disabled",
    "read_only",
]

DISABLE_ENV = "TOKENLOOM_DISABLE_NUMBA"
"""Environment variable: set to ``1`` to run the readable reference kernels."""

KERNEL_MODULES = (
    "sample_index",
    "blend_scan",
    "blend_fast",
    "blend_phases",
    "shuffle",
    "batch",
    "permutation",
    "bijection",
    "ranges",
)
"""The numba kernel modules of this package, as ``KERNELS.get`` names them."""

_NUMBA_PARTS = ("numba", "llvmlite")
logger = logging.getLogger(__name__)


def numba_disabled() -> bool:
    """Whether ``$TOKENLOOM_DISABLE_NUMBA`` asks for the reference kernels."""
    return os.environ.get(DISABLE_ENV, "").strip() not in ("", "0")


class KernelLoader:
    """Loads the kernel modules once each, and owns the background loading thread.

    Thread-safe. :meth:`clear` forgets the loaded modules (the process-cache registry
    calls it); numba's own compiled code stays in memory and on disk. ``guard`` (the
    process's :data:`~tokenloom.kernels.shutdown.GUARD` by default) is closed by
    :meth:`exit`.
    """

    def __init__(self, guard: ExitGuard = GUARD) -> None:
        self._guard = guard  # keeps an exit out of LLVM calls and numba's cache writes
        self._lock = threading.RLock()  # the queue and thread of background tasks
        self._import_lock = threading.RLock()  # imports: slow, and must not block submit()
        self._modules: dict[str, Optional[ModuleType]] = {}
        self._unusable: Optional[str] = None  # why numba cannot run, once known
        self._warned = False
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False
        self._exiting = False

    # -- loading ---------------------------------------------------------------------
    def available(self) -> bool:
        """Whether kernels may run (not disabled, numba installed), without importing
        numba: a cheap test for "will ``get`` return a module"."""
        if numba_disabled() or self._unusable is not None:
            return False
        return importlib.util.find_spec("numba") is not None

    def get(self, name: str) -> Optional[ModuleType]:
        """The kernel module ``tokenloom.kernels.<name>``, or None (reference path)."""
        if name not in KERNEL_MODULES:
            raise ValueError(f"unknown kernel module {name!r}; one of {KERNEL_MODULES}")
        if numba_disabled():
            return None
        module = self._modules.get(name)
        if module is not None or name in self._modules:
            return module
        with self._import_lock:
            if name not in self._modules:
                self._modules[name] = self._import(name)
            return self._modules[name]

    def started(self) -> bool:
        """Whether a kernel of this loader has machine code loaded (has run) in this
        process: numba's compiler is then set up, and the first call of another kernel
        costs ~20 ms instead of the process's first 0.3-0.7 s (dispatch weighs this)."""
        modules = [module for module in list(self._modules.values()) if module is not None]
        return any(_has_machine_code(value) for m in modules for value in vars(m).values())

    def require(self, name: str) -> ModuleType:
        """Like :meth:`get`, but raises RuntimeError naming why the kernels cannot run."""
        module = self.get(name)
        if module is None:
            why = f"{DISABLE_ENV} is set" if numba_disabled() else self._unusable
            raise RuntimeError(f"tokenloom kernel module {name!r} is unavailable: {why}")
        return module

    def _import(self, name: str) -> Optional[ModuleType]:
        if self._unusable is not None:
            return None
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in _NUMBA_PARTS:
                raise
            self._mark_unusable(f"{error.name} cannot be imported")
        except (ImportError, RuntimeError, OSError) as error:  # present but unusable
            self._mark_unusable(f"{type(error).__name__}: {error}")
        else:
            self._guard.install()  # numba is imported now: its compiles are guarded
            return module
        return None

    def _mark_unusable(self, reason: str) -> None:
        self._unusable = reason
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"tokenloom: numba kernels unavailable ({reason}); using the readable "
                f"reference kernels (same results, slower). Install numba, or set "
                f"{DISABLE_ENV}=1 to choose the reference path and silence this warning",
                RuntimeWarning,
                stacklevel=5,
            )

    def clear(self) -> None:
        """Forget loaded modules and a failed numba import (the next ``get`` retries)."""
        with self._import_lock:
            self._modules.clear()
            self._unusable = None
            self._warned = False

    # -- background loading ----------------------------------------------------------
    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task()`` in the loading thread (at once in this thread once stopped).

        Exceptions of ``task`` are logged at debug level and dropped: a task only makes
        a faster path available, the readable one keeps serving; for the same reason a
        task submitted once the interpreter exits is dropped."""
        with self._lock:
            if self._exiting:
                return
            if not self._stopped:
                self._queue.append(task)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._drain, name="tokenloom-kernel-loader", daemon=True
                    )
                    self._thread.start()
                return
        _run_task(task)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._exiting:
                    self._thread = None
                    return
                task = self._queue.popleft()
            if not numba_disabled():
                self._guard.install()  # every task loads compiled code: LLVM guarded
            _run_task(task)

    def pending(self) -> bool:
        """Whether a background task is queued or running."""
        with self._lock:
            return self._thread is not None

    def join(self, timeout: float = 120.0) -> bool:
        """Wait until every submitted task has run (at most ``timeout`` seconds);
        whether none is left."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return not self.pending()

    def stop(self) -> None:
        """Finish pending tasks; later ``submit`` calls run their task at once."""
        with self._lock:
            self._stopped = True
        self.join()

    def restart(self) -> None:
        """Undo :meth:`stop` (and :meth:`exit`): tasks go to the background thread again."""
        with self._lock:
            self._stopped = self._exiting = False

    def exit(self) -> None:
        """At interpreter exit: drop the queued tasks and abandon the running one (never
        waited for; :data:`~tokenloom.kernels.shutdown.GUARD` stops it outside LLVM and
        outside numba's cache write, within milliseconds)."""
        with self._lock:
            self._exiting = True
            self._queue.clear()
        self._guard.close()


def _has_machine_code(value: object) -> bool:
    """Whether ``value`` is a numba dispatcher with a compiled (or cache-loaded) signature."""
    # read_attribute/has_attribute treat an attribute that fails to read as absent
    return bool(read_attribute(value, "signatures")) and has_attribute(value, "py_func")


def _run_task(task: Callable[[], None]) -> None:
    try:
        task()
    except Exception:  # noqa: BLE001 - the reference path keeps serving
        logger.debug("a background kernel load failed", exc_info=True)


def compiled_entry(kernel: Any, args: tuple[Any, ...]) -> Any:
    """The machine code ``kernel`` (a numba dispatcher) runs for arguments typed exactly
    like ``args``, callable without the dispatcher's per-call type resolution;
    ``kernel`` itself when no such specialisation is loaded or numba's API differs.

    The entry point converts its arguments without checking array dtypes: the caller
    must pass arrays of exactly ``args``' types (the same objects, or fresh ones made
    the same way)."""
    try:
        from numba import typeof

        return kernel.get_overload(tuple(typeof(value) for value in args))  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - any failure: the dispatcher is always correct
        return kernel


def read_only(array: Any) -> Any:
    """A read-only view of ``array`` (itself when already read-only).

    numba compiles a kernel once per argument type, and a read-only array is another
    type than a writable one. Index arrays are writable when just built and read-only
    when mapped from a cache, so the callers pass every array a kernel only reads
    through this: one specialisation to compile, load and warm up, not two."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def cache_locations() -> list[str]:
    """Where numba's on-disk cache for these kernels goes, in numba's order of choice:
    ``$NUMBA_CACHE_DIR`` if set, this package's ``__pycache__`` if writable, else the
    user-wide cache directory (``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba``)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    if os.environ.get("NUMBA_CACHE_DIR"):
        return [os.environ["NUMBA_CACHE_DIR"]]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [here, os.path.join(base, "numba")]


KERNELS = KernelLoader()
"""The process's kernel loader."""

register_state(
    KERNELS,
    "kernels: the kernel loader",
    "the kernel modules loaded (or why numba cannot run) and the background loading thread",
    KERNELS.clear,
    before_fork=KERNELS.join,
    at_exit=KERNELS.exit,
)
register_state(
    GUARD,
    "kernels.shutdown: the exit guard",
    "the threads inside an LLVM call or a numba cache write now (nothing to reset: "
    "it holds only what runs)",
    None,
    after_fork_in_child=GUARD.after_fork,
)
