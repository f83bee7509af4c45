"""Every process-level cache of tokenloom, declared in this one module.

A process-level cache remembers a fact across calls (a file's digest by its ``stat``,
what a cache directory's pack files hold, ...) so that a second build in the same
process skips work. Each one here is a :class:`BoundedCache`: a thread-safe mapping
that keeps at most ``bound`` entries (the oldest go first) and that
:func:`clear_process_caches` empties. A cache only ever saves work: clearing one, or
an entry evicted from it, makes the next call recompute, never changes a result.

Modules keep no other state at module level: a new cache is declared here, with its
bound and what it holds, and imported from here by the module that fills it.

``clear_process_caches()``
    Empty every cache (tests, or a long-lived process that wants its memory back).
``process_caches() -> list[BoundedCache]``
    Every cache, with ``.name``, ``.bound``, ``.holds`` and ``len(cache)``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, Optional, TypeVar

__all__ = [
    "BoundedCache",
    "clear_process_caches",
    "process_caches",
    "IDX_DIGESTS",
    "ABSOLUTE_PATHS",
    "PACK_LISTINGS",
    "GPT_DESCRIPTION_MIDDLES",
    "SEEDED_STATES",
    "DOCUMENT_DRAWS",
    "SHUFFLE_DRAWS",
    "ONE_TIME_NOTICES",
    "FLAVOURED_ERRORS",
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


_REGISTRY: dict[str, BoundedCache[Any, Any]] = {}


def _declare(cache: BoundedCache[K, V]) -> BoundedCache[K, V]:
    _REGISTRY[cache.name] = cache
    return cache


def process_caches() -> list[BoundedCache[Any, Any]]:
    """Every process-level cache, in declaration order."""
    return list(_REGISTRY.values())


def clear_process_caches() -> None:
    """Empty every process-level cache (results never change; later calls recompute)."""
    for cache in _REGISTRY.values():
        cache.clear()


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
