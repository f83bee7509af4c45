"""Every piece of tokenloom's process state, registered in this one module.

Two kinds, both listed by :func:`process_state` and reset by :func:`clear_process_caches`:

* **caches**: a process-level cache remembers a fact across calls (a file's digest by
  its ``stat``, what a cache directory's pack files hold, ...) so that a second build in
  the same process skips work. Each one is a :class:`BoundedCache` declared here: a
  thread-safe mapping that keeps at most ``bound`` entries (the oldest go first). A
  cache only ever saves work: clearing one, or an entry evicted from it, makes the next
  call recompute, never changes a result.
* **other state**: an object that must live as long as the process (the kernel loader
  and its thread, the object-storage client pool, the registries of live memory maps)
  stays in the module that owns it, which registers it here with
  :func:`register_state`: its name, what it holds, how to reset it, and its hooks for
  ``fork`` and interpreter exit. Those hooks run from here (this module's one
  ``os.register_at_fork`` and one ``atexit`` handler), in registration order.

Modules keep no other state at module level (``tests/test_process_caches.py`` scans
the whole tree): a new cache is declared here, with its bound and what it holds, and
imported from here by the module that fills it; a new stateful object is registered.

``clear_process_caches()``
    Empty every cache and reset every registered state (tests, or a long-lived process
    that wants its memory back); results never change.
``process_caches() -> list[BoundedCache]``
    Every cache, with ``.name``, ``.bound``, ``.holds`` and ``len(cache)``.
``process_state() -> list[BoundedCache | ProcessState]``
    Every cache and every registered state, each with ``.name`` and ``.holds``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, Optional, TypeVar, Union

__all__ = [
    "BoundedCache",
    "ProcessState",
    "clear_process_caches",
    "process_caches",
    "process_state",
    "register_state",
    "IDX_DIGESTS",
    "ABSOLUTE_PATHS",
    "PACK_LISTINGS",
    "GPT_DESCRIPTION_MIDDLES",
    "SEEDED_STATES",
    "DOCUMENT_DRAWS",
    "SHUFFLE_DRAWS",
    "ONE_TIME_NOTICES",
    "FLAVOURED_ERRORS",
    "CAST_RULES",
    "SEEDED_GENERATORS",
    "CAUSAL_MASKS",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A thread-safe mapping of at most ``bound`` entries; when full, the entry stored
    first is dropped (lookups take no lock: a cache on the hot path of a warm start).

    Args:
        name: the owner and purpose, e.g. ``"format.identity: .idx digests"``.
        bound: the most entries kept (>= 1).
        holds: one line saying what a key and a value are.
    """

    def __init__(self, name: str, bound: int, holds: str) -> None:
        if bound < 1:
            raise ValueError(f"bound must be >= 1, got {bound}")
        self.name, self.bound, self.holds = name, int(bound), holds
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> Optional[V]:
        """The value of ``key``, or None."""
        return self._entries.get(key)  # one dict lookup: atomic

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key``, dropping the oldest entries beyond the bound;
        returns ``value``."""
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.bound:
                self._entries.popitem(last=False)
        return value

    def pop(self, key: K) -> Optional[V]:
        """Forget ``key``; its value, or None."""
        with self._lock:
            return self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return f"BoundedCache({self.name!r}, {len(self)}/{self.bound})"


Hook = Callable[[], object]  # what it returns is ignored
logger = logging.getLogger(__name__)


class ProcessState:
    """A registered piece of process state that is not a :class:`BoundedCache`.

    Args:
        owner: the stateful object (e.g. the kernel loader), as its module binds it.
        name: the module and purpose, e.g. ``"kernels: the kernel loader"``.
        holds: one line saying what it holds and why it must live in the process.
        reset: forgets what it holds, safely at any time (a later call rebuilds it);
            :func:`clear_process_caches` calls it. None for state that holds only what
            is live (open mappings, by weak reference): forgetting it would only lose
            track of them, so there is nothing to reset.
        before_fork: runs in the parent just before ``os.fork`` (e.g. wait for a
            thread that holds a lock the child would inherit held).
        after_fork_in_child: runs in a new child (e.g. drop the parent's connections).
        at_exit: runs at interpreter exit; it must return at once (a process whose
            work is done exits at once).
    """

    def __init__(
        self,
        owner: object,
        name: str,
        holds: str,
        reset: Optional[Hook],
        before_fork: Optional[Hook] = None,
        after_fork_in_child: Optional[Hook] = None,
        at_exit: Optional[Hook] = None,
    ) -> None:
        self.owner, self.name, self.holds, self.reset = owner, name, holds, reset
        self.before_fork, self.after_fork_in_child = before_fork, after_fork_in_child
        self.at_exit = at_exit

    def __repr__(self) -> str:
        return f"ProcessState({self.name!r})"


_REGISTRY: dict[str, BoundedCache[Any, Any]] = {}
_STATES: dict[str, ProcessState] = {}


def _declare(cache: BoundedCache[K, V]) -> BoundedCache[K, V]:
    _REGISTRY[cache.name] = cache
    return cache


def register_state(
    owner: object,
    name: str,
    holds: str,
    reset: Optional[Hook],
    *,
    before_fork: Optional[Hook] = None,
    after_fork_in_child: Optional[Hook] = None,
    at_exit: Optional[Hook] = None,
) -> ProcessState:
    """Register a module's process state (see :class:`ProcessState` for the arguments);
    registering a name again replaces the entry (a reloaded module)."""
    state = ProcessState(owner, name, holds, reset, before_fork, after_fork_in_child, at_exit)
    _STATES[name] = state
    return state


def process_caches() -> list[BoundedCache[Any, Any]]:
    """Every process-level cache, in declaration order."""
    return list(_REGISTRY.values())


def process_state() -> list[Union[BoundedCache[Any, Any], ProcessState]]:
    """Every cache, then every registered state, in registration order."""
    return [*_REGISTRY.values(), *_STATES.values()]


def clear_process_caches() -> None:
    """Empty every process-level cache and reset every registered state (results never
    change; later calls recompute)."""
    for cache in _REGISTRY.values():
        cache.clear()
    for state in list(_STATES.values()):
        if state.reset is not None:
            state.reset()


def _run_hooks(kind: str, hooks: list[Optional[Hook]]) -> None:
    """Run every hook; one that raises is logged and the others still run (a fork or
    exit hook must never stop the fork or the exit)."""
    for hook in hooks:
        if hook is None:
            continue
        try:
            hook()
        except Exception:  # noqa: BLE001 - see the docstring
            logger.warning("a process-state %s hook failed", kind, exc_info=True)


def _before_fork() -> None:
    _run_hooks("before-fork", [s.before_fork for s in reversed(list(_STATES.values()))])


def _after_fork_in_child() -> None:
    _run_hooks("after-fork", [s.after_fork_in_child for s in list(_STATES.values())])


def _at_exit() -> None:
    _run_hooks("exit", [s.at_exit for s in reversed(list(_STATES.values()))])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


# -- the caches -----------------------------------------------------------------------
IDX_DIGESTS: BoundedCache[tuple[object, ...], str] = _declare(
    BoundedCache(
        "format.identity: .idx digests",
        1 << 16,
        "(absolute .idx path, inode, size, mtime_ns, ctime_ns) -> digest of the whole file",
    )
)
ABSOLUTE_PATHS: BoundedCache[str, str] = _declare(
    BoundedCache(
        "cache.pack: absolute cache directories",
        4096,
        "cache directory as given -> os.path.abspath of it",
    )
)
PACK_LISTINGS: BoundedCache[str, Any] = _declare(
    BoundedCache(
        "cache.pack: pack directory listings",
        256,
        "absolute packs/ folder -> what its pack files hold (a PackListing)",
    )
)
GPT_DESCRIPTION_MIDDLES: BoundedCache[tuple[str, bool, bool], tuple[Any, str]] = _declare(
    BoundedCache(
        "builder.startup: GPT description middles",
        256,
        "(repr of seed, sequence length and split, extra token, drop last) -> "
        "(tokenizer identity, JSON text)",
    )
)
SEEDED_STATES: BoundedCache[int, Any] = _declare(
    BoundedCache(
        "datasets._gpt_indices: seeded generator states",
        64,
        "random_seed -> RandomState(random_seed).get_state() (restoring beats seeding)",
    )
)
DOCUMENT_DRAWS: BoundedCache[tuple[Any, ...], Any] = _declare(
    BoundedCache(
        "datasets._rng_memo: document-index permutations",
        1024,
        "(seed, documents, epochs, separate final epoch) -> (permutation of at most 65,536 "
        "positions, generator state after it)",
    )
)
SHUFFLE_DRAWS: BoundedCache[tuple[Any, ...], Any] = _declare(
    BoundedCache(
        "datasets._rng_memo: shuffle-index permutations",
        1024,
        "document draw key + (num_samples, total_size) -> shuffle index of at most 65,536",
    )
)
ONE_TIME_NOTICES: BoundedCache[str, bool] = _declare(
    BoundedCache(
        "megatron: notices given once per process",
        64,
        "notice name (e.g. 'compile_helpers') -> True once it was logged",
    )
)
FLAVOURED_ERRORS: BoundedCache[type, type] = _declare(
    BoundedCache(
        "megatron.errors: flavoured error classes",
        256,
        "tokenloom error class -> its subclass that is also an AssertionError",
    )
)
CAST_RULES: BoundedCache[tuple[Any, Any], tuple[Optional[tuple[int, int]]]] = _declare(
    BoundedCache(
        "format._buffers: dtype cast rules",
        256,
        "(source dtype, target dtype) -> (None when every value fits, else the (min, max) "
        "to check,)",
    )
)
SEEDED_GENERATORS: BoundedCache[int, Any] = _declare(
    BoundedCache(
        "datasets._gpt_indices: reusable generators",
        256,
        "thread ident -> that thread's RandomState, set to a saved state before each use",
    )
)
CAUSAL_MASKS: BoundedCache[int, Any] = _declare(
    BoundedCache(
        "training.collate: causal attention masks",
        4,
        "sequence length -> the [1, 1, s, s] bool torch tensor, True above the diagonal",
    )
)
