"""``CachedIndices``: the index arrays of one dataset, loaded from its cache or built.

``GPTDataset`` and ``BlendedDataset`` both hold their index arrays in one of these, so
that loading, rebuilding and their warnings and errors are the same for both:

* :meth:`CachedIndices.load_or_build`: the entry is looked up; a miss is built and
  stored; an entry that is present but damaged or stale is rebuilt with the warning
  ``"<dataset>: index cache <file> is damaged or stale; rebuilding it"``. Without
  ``can_build`` a miss or a damaged entry raises :class:`~tokenloom.errors.CacheError`
  naming the file.
* :meth:`CachedIndices.defer`: nothing is read now; the entry is loaded at the first
  :meth:`arrays` call (``rebuild=True``: a missing or damaged entry is then rebuilt as
  above; ``expected_length``: the loaded entry must hold that many samples).

Pickled copies (DataLoader workers) re-map the entry on their own first use.

A holder made with ``owner`` calls its ``build``, ``where`` and ``checks`` functions
with the owner (``GPTDataset`` passes its class's functions): a blend of thousands of
prefixes then holds no bound method or closure per dataset, objects that the cyclic
garbage collector would walk after every build.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Optional, Union

import numpy

from tokenloom.cache.keys import CacheKey
from tokenloom.cache.store import IndexCache, LazyArrays
from tokenloom.errors import CacheError

__all__ = ["CachedIndices"]

logger = logging.getLogger(__name__)

Arrays = dict[str, numpy.ndarray]


class CachedIndices:
    """The index arrays ``names`` of one dataset.

    Args:
        names: the arrays, in order.
        cache, key: where the arrays are cached; ``cache=None``: they are not cached.
        build: builds the arrays.
        where: names the dataset in warnings and errors (called only for those).
        checks: stored with the entry, and compared on lookup; a callable returning
            them is called once, when they are first needed (a deferred entry that is
            never read never computes them).
        verify: how loads check the entry (``"size"`` or ``"checksum"``).
        can_build: whether a missing or damaged entry may be built; if not, it raises
            CacheError naming the file.
        validate: called with the arrays of an entry read from the cache (not with
            arrays just built), and with where they came from; raises CacheError when
            they do not fit the dataset.
        wrap: what :meth:`arrays` serves instead of the stored arrays (built or loaded;
            validate sees the wrapped ones), e.g. a computed stand-in for a tiny stored
            table; None serves them as stored.
        owner: when given, ``build``, ``where`` and a callable ``checks`` are called
            with it as their one argument (functions of its class, not bound methods).
    """

    def __init__(
        self,
        names: tuple[str, ...],
        cache: Optional[IndexCache],
        key: Optional[CacheKey],
        build: Callable[..., Arrays],
        where: Callable[..., str],
        *,
        checks: Union[None, Mapping[str, object], Callable[..., Mapping[str, object]]] = None,
        verify: str = "checksum",
        can_build: bool = True,
        validate: Optional[Callable[[Arrays, str], None]] = None,
        wrap: Optional[Callable[[Arrays], Arrays]] = None,
        owner: Optional[object] = None,
    ) -> None:
        self.names, self.cache, self.key = names, cache, key
        self._build, self._where, self._owner = build, where, owner
        self._checks = checks
        self.verify, self.can_build, self.validate = verify, can_build, validate
        self.wrap = wrap
        self.expected_length: Optional[int] = None
        self._arrays: Optional[Arrays] = None
        self._lazy: Optional[LazyArrays] = None
        self._deferred: Optional[str] = None  # the verify mode of a deferred entry
        self._rebuild = False
        self._length_of = names[-1]

    def build(self) -> Arrays:
        """The arrays, built (the ``build`` argument called)."""
        owner = self._owner
        return self._build() if owner is None else self._build(owner)

    def where(self) -> str:
        """Names the dataset in warnings and errors (the ``where`` argument called)."""
        owner = self._owner
        return self._where() if owner is None else self._where(owner)

    @property
    def checks(self) -> Optional[dict[str, object]]:
        """What is stored with the entry and compared on lookup (computed on first use)."""
        given = self._checks
        if callable(given):
            given = given() if self._owner is None else given(self._owner)
        checks = dict(given) if given else None
        self._checks = checks
        return checks

    @property
    def loaded(self) -> bool:
        """Whether the arrays are in memory or mapped (False while deferred)."""
        return self._arrays is not None

    def load_or_build(self) -> None:
        """Load the entry, or build (and store) the arrays; see the module docstring."""
        cache, key = self.cache, self.key
        if cache is None or key is None:
            self._arrays = self._wrapped(self.build())
            return
        checks = self.checks
        arrays, present = cache.probe(
            key,
            self.names,
            verify=self.verify,
            checks=checks,
            on_corrupt="miss" if self.can_build else "raise",
        )
        if arrays is None and not self.can_build:  # raises CacheError naming the file
            arrays = cache.load(key, self.names, verify=self.verify, checks=checks)
        if arrays is None:
            if present:
                logger.warning(
                    "%s: index cache %s is damaged or stale; rebuilding it",
                    self.where(),
                    cache.description_path(key),
                )
            arrays = self.build()
            cache.store(key, arrays, checks=checks)
            arrays = self._wrapped(arrays)
        else:
            arrays = self._wrapped(arrays)
            self._validate(arrays)
        self._lazy = cache.lazy(key, self.names, checks=checks)
        self._arrays = arrays

    def _wrapped(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        held = {name: numpy.asarray(array) for name, array in arrays.items()}
        return held if self.wrap is None else self.wrap(held)

    def defer(
        self,
        *,
        verify: str = "size",
        expected_length: Optional[int] = None,
        rebuild: bool = False,
        length_of: Optional[str] = None,
    ) -> None:
        """Load the entry at the first :meth:`arrays` call (see the module docstring);
        ``length_of``: the array whose length ``expected_length`` is (the last name)."""
        if self.cache is None or self.key is None:
            raise CacheError("cannot defer indices that are not cached")
        self._deferred = verify  # the entry's view is made at the first arrays() call
        self.expected_length, self._rebuild = expected_length, rebuild
        self._length_of = length_of or self.names[-1]

    def arrays(self) -> Arrays:
        """The arrays (loaded now when deferred)."""
        arrays = self._arrays
        if arrays is None:
            arrays = self._load_deferred()
        return arrays

    def _load_deferred(self) -> Arrays:
        lazy = self._lazy
        if lazy is None and self._deferred is not None and self.cache is not None and self.key:
            lazy = self._lazy = self.cache.lazy(
                self.key, self.names, verify=self._deferred, checks=self.checks
            )
        if lazy is None:
            self.load_or_build()
        else:
            try:
                self._arrays = self._wrapped({name: lazy[name] for name in self.names})
            except CacheError:
                if not (self._rebuild and self.can_build):
                    raise
                self.load_or_build()
            else:
                self._validate(self._arrays)
        arrays = self._arrays
        if arrays is None:
            raise CacheError(f"{self.where()}: the index arrays could not be loaded")
        self._check_length(arrays)
        return arrays

    def _validate(self, arrays: Arrays) -> None:
        if self.validate is not None and self.cache is not None and self.key is not None:
            self.validate(arrays, f"index cache {self.cache.description_path(self.key)}")

    def _check_length(self, arrays: Arrays) -> None:
        expected = self.expected_length
        if expected is None or self.cache is None or self.key is None:
            return
        found = int(arrays[self._length_of].shape[0])
        if found != expected:
            raise CacheError(
                f"{self.where()}: the index cache {self.cache.description_path(self.key)} holds "
                f"{found} samples but the start-up memo recorded {expected}; delete both from "
                f"{self.cache.path_to_cache}"
            )

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_checks"] = self.checks  # computed: a callable need not pickle
        if state.get("_lazy") is not None:
            state["_arrays"] = None  # reopen the cached indices by mmap in the worker
        return state
