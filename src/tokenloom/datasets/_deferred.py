"""``DeferredIndexedDataset``: an ``IndexedDataset`` that opens its files on first use.

A blend of thousands of prefixes touches one prefix for its first sample; opening all
of them (two file mappings and a validation pass each) is most of a warm start.
The builder hands a GPTDataset this subclass when the start-up memo
(:mod:`tokenloom._startup_memo`) vouches for the prefix's ``.idx``: its length, dtype
and file identity come from the memo, and anything else (sequence lengths, tokens,
reads) opens the real files first, exactly as ``IndexedDataset(...)`` would.

Opening re-checks the ``.idx`` ``stat`` against the memo and passes the recorded
counts and dtype as ``sequences_per_dataset``/``dtype_code``, which ``IndexedDataset``
verifies against the header: a file changed since start-up raises
:class:`~tokenloom.errors.FormatError` instead of being read under stale indices.
Pickled copies (DataLoader workers) stay deferred and open on their own first use.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional

from tokenloom.errors import FormatError
from tokenloom.format import DType, IndexedDataset

__all__ = ["DeferredIndexedDataset"]

_OPEN_LOCK = threading.Lock()


class DeferredIndexedDataset(IndexedDataset):
    """An ``IndexedDataset`` whose files are opened at the first access that needs them.

    Args:
        facts: the prefix's :class:`~tokenloom._startup_memo.PrefixFacts`.
        lengths: known sample counts by GPT cache stem (the memo's), or None.
        mmap, fast_cache_load: as for ``IndexedDataset``.
    """

    def __init__(self, facts: Any, lengths: Optional[Dict[str, int]] = None, *,
                 mmap: bool = True, fast_cache_load: bool = False) -> None:  # noqa: super
        state = self.__dict__
        state.update(path_prefix=facts.prefix, multimodal=False, mmap=bool(mmap),
                     object_storage_config=None, fast_cache_load=bool(fast_cache_load),
                     sequences_per_dataset=(facts.sequence_count, facts.document_count),
                     dtype_code=facts.dtype_code, dtype=DType.dtype_from_code(facts.dtype_code),
                     _count=facts.sequence_count, _facts=facts, _known_lengths=lengths or {},
                     _opened=False, _opening=False)

    # -- what is known without opening ---------------------------------------------
    def file_identity(self):
        """The cache file identity of the pair (``tokenloom.cache.file_identity``)."""
        return self._facts.file_identity()

    def file_identity_json(self) -> str:
        """``tokenloom.cache.describe(self.file_identity())``, without building it."""
        return self._facts.file_identity_json()

    def known_length(self, stem: str) -> Optional[int]:
        """Samples of the GPT index cached under ``stem``, if the memo knows it."""
        return self._known_lengths.get(stem)

    @property
    def opened(self) -> bool:
        """Whether the files have been opened."""
        return self.__dict__.get("_opened", True)

    # -- opening on first use ----------------------------------------------------------
    def __getattr__(self, name: str):
        state = self.__dict__
        if name.startswith("__") or "_facts" not in state or state["_opened"] \
                or state["_opening"]:
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
        self._open_now()
        return getattr(self, name)

    def _open_now(self) -> None:
        with _OPEN_LOCK:
            state = self.__dict__
            if state["_opened"]:
                return
            facts = state["_facts"]
            if not facts.unchanged():
                raise FormatError(
                    f"{facts.idx_path} changed after the datasets were built over it (its "
                    f"size, times or inode differ from start-up); rebuild the datasets")
            state["_opening"] = True
            try:
                IndexedDataset.__init__(
                    self, self.path_prefix, multimodal=False, mmap=self.mmap,
                    fast_cache_load=self.fast_cache_load,
                    sequences_per_dataset=self.sequences_per_dataset, dtype_code=self.dtype_code)
            finally:
                state["_opening"] = False
            state["_opened"] = True

    def close(self) -> None:
        """Release the files (nothing to release when they were never opened)."""
        if not self.opened:
            self.__dict__.update(_opened=True, _index=None, _lengths=None, _pointers=None,
                                 _tokens=None)
            return
        super().close()

    # -- pickling: stay deferred in the receiving process ---------------------------
    def __getstate__(self) -> dict:
        state = self.__dict__
        return {"facts": state["_facts"], "lengths": state["_known_lengths"],
                "mmap": state["mmap"], "fast_cache_load": state["fast_cache_load"]}

    def __setstate__(self, state: dict) -> None:
        DeferredIndexedDataset.__init__(self, state["facts"], state["lengths"],
                                        mmap=state["mmap"], fast_cache_load=state["fast_cache_load"])
