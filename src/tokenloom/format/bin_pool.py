"""A bounded pool of the live mappings and file descriptors of ``.bin`` files.

A blend of thousands of prefixes, every one read, would otherwise keep one mapping (or,
with ``mmap=False``, one open descriptor) per ``.bin`` for the life of the job, and run
into a filesystem's mmap quota, ``vm.max_map_count`` or ``ulimit -n``. Every local
``.bin`` reader (:mod:`tokenloom.format.bin_readers`) opens its mapping or descriptor
on first use and joins :data:`BIN_POOL`; past :attr:`BinPool.bound` members (set by
``GPTDatasetConfig(max_open_bin_files=N)``, default :data:`DEFAULT_MAX_OPEN_BIN_FILES`)
the least recently used one is evicted: it drops its mapping or closes its descriptor,
and reopens transparently on its next read (checking first that the file is still the
one it opened: a replaced file is a ``FormatError`` naming it).

Lifetime: eviction only drops the reader's own reference. A numpy view handed out (a
sample being read in another thread, ``IndexedDataset.get``'s zero-copy arrays) keeps
its mapping alive until the view is collected, so a view is never invalidated; the
mappings live at any instant are the pool's members plus those still viewed.

Recency is a stamp from one shared clock that a reader takes on every access (one
attribute store); eviction, which runs only when a reader opens, scans the members for
the oldest stamp. After ``fork`` the child closes the descriptors it inherited (its own
copies: the parent's stay open) and its readers reopen on their next read; inherited
mappings stay valid and are kept.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

from tokenloom.process_caches import register_state

__all__ = ["BIN_POOL", "BinPool", "DEFAULT_MAX_OPEN_BIN_FILES", "Pooled"]

DEFAULT_MAX_OPEN_BIN_FILES = 256
"""The default bound: far below the common limits (``ulimit -n`` 1,024, a WekaFS mmap
quota of about 590 per process, ``vm.max_map_count`` 65,530)."""


class Pooled(Protocol):
    """A reader whose mapping or descriptor the pool may close."""

    stamp: int

    def evict(self) -> None:
        """Drop the mapping or close the descriptor (reopened on the next read)."""

    def forget_after_fork(self) -> None:
        """In a forked child: close inherited descriptors (a mapping may stay)."""


class BinPool:
    """The live ``.bin`` readers of this process, at most ``bound`` of them open.

    Args:
        bound: the most readers holding a mapping or descriptor at once (>= 1).
    """

    def __init__(self, bound: int = DEFAULT_MAX_OPEN_BIN_FILES) -> None:
        self.bound = int(bound)
        self.clock = itertools.count(1)  # next(clock): a reader's recency stamp
        self._lock = threading.Lock()
        self._members: dict[int, weakref.ref[Pooled]] = {}
        self.opened = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._members)

    def admit(self, reader: Pooled) -> None:
        """``reader`` has just opened its mapping or descriptor: count it, and evict the
        least recently used others while more than :attr:`bound` are open. Call it
        holding none of the reader's locks (eviction takes the victims' locks)."""
        key = id(reader)
        with self._lock:
            self.opened += 1
            self._members[key] = weakref.ref(reader, self._forgetter(key))
            victims = self._victims(key)
        for victim in victims:
            victim.evict()

    def _forgetter(self, key: int) -> Callable[[object], None]:
        def forget(_: object) -> None:  # a collected reader (GC callback: takes no lock)
            self._members.pop(key, None)

        return forget

    def _victims(self, keep: int) -> list[Pooled]:
        """Remove and return the oldest members beyond the bound (never ``keep``)."""
        excess = len(self._members) - self.bound
        if excess <= 0:
            return []
        live = [(r, k) for k, ref in list(self._members.items()) if (r := ref()) is not None]
        live = [(r, k) for r, k in live if k != keep]
        live.sort(key=lambda pair: pair[0].stamp)
        victims = [r for r, _ in live[:excess]]
        for _, k in live[:excess]:
            self._members.pop(k, None)
        self.evicted += len(victims)
        return victims

    def leave(self, reader: Pooled) -> None:
        """``reader`` closed its mapping or descriptor itself (closed, or evicted)."""
        self._members.pop(id(reader), None)

    def resize(self, bound: int) -> None:
        """Keep at most ``bound`` (>= 1) open from now on, evicting the excess now."""
        if bound < 1:
            raise ValueError(f"max_open_bin_files must be >= 1, got {bound}")
        if bound == self.bound:  # every dataset of a config resizes to the same bound
            return
        with self._lock:
            self.bound = int(bound)
            victims = self._victims(-1)
        for victim in victims:
            victim.evict()

    def members(self) -> list[Pooled]:
        """The readers open now, in no particular order."""
        return [r for ref in list(self._members.values()) if (r := ref()) is not None]

    def reset(self) -> None:
        """Evict every member (:func:`tokenloom.clear_process_caches`); they reopen on use."""
        with self._lock:
            victims = self.members()
            self._members.clear()
        for victim in victims:
            victim.evict()

    def after_fork_in_child(self) -> None:
        """In a new child: a fresh lock (the parent's may have been held at fork), and
        every member closes the descriptors it inherited. Takes no other lock."""
        self._lock = threading.Lock()
        for reader in self.members():
            reader.forget_after_fork()


#: the pool of every local ``.bin`` reader of this process (see :class:`BinPool`)
BIN_POOL = BinPool()
register_state(
    BIN_POOL,
    "format.bin_pool: open .bin mappings and descriptors",
    "weak references to the .bin readers that hold a mapping or descriptor now, at most "
    "max_open_bin_files of them (the least recently used is closed, and reopens on use)",
    BIN_POOL.reset,
    after_fork_in_child=BIN_POOL.after_fork_in_child,
)
