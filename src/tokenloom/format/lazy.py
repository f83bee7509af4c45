"""``LazyIndexedDataset``: an ``IndexedDataset`` opened at the first access that needs it.

A blend of thousands of prefixes reads one prefix for its first sample; opening all of
them is most of a warm start. When what a start needs of a pair is already known
(:class:`PairFacts`: counts, dtype and file identity, e.g. from the builder's start-up
memo), a ``LazyIndexedDataset`` answers ``len()``, ``dtype`` and :meth:`file_identity`
from them, and opens the real :class:`IndexedDataset` (which it then wraps and
delegates to) on the first access to sequences, sections or tokens.

Opening first checks that the ``.idx`` still has the recorded ``stat`` (and the ``.bin``
its size and mtime), and passes the
recorded counts and dtype as ``sequences_per_dataset``/``dtype_code``, which
``IndexedDataset`` verifies against the header: a file changed since the facts were
taken raises :class:`~tokenloom.errors.FormatError` instead of being read under stale
indices. It may also be given an already-parsed :class:`IndexFile` (its sections serve
reads of the sequence lengths, pointers and document index until the pair is opened)
or an already-open ``IndexedDataset`` (released again by :meth:`release`).
Pickled copies (DataLoader workers) stay lazy and open on their own first use.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy

from tokenloom.errors import FormatError
from tokenloom.format.dtypes import DType
from tokenloom.format.identity import DIGEST_NAME, stat_key
from tokenloom.format.reader import IndexedDataset, IndexFile

__all__ = ["LazyIndexedDataset", "PairFacts"]


@dataclass(frozen=True)
class PairFacts:
    """What is known of a ``.bin``/``.idx`` pair without opening it."""

    prefix: str
    """The path prefix, as given."""
    idx_path: str
    """``os.path.abspath(prefix + ".idx")``."""
    idx_stat: tuple[int, int, int, int]
    """``(size, mtime_ns, ctime_ns, inode)`` of the ``.idx`` the facts were read from."""
    dtype_code: int
    """The header's dtype code."""
    sequence_count: int
    """The header's sequence count."""
    document_count: int
    """The header's document index length."""
    idx_digest: str
    """The digest of the whole ``.idx`` (:func:`tokenloom.format.identity.idx_digest`)."""
    bin_size: int
    """The ``.bin``'s size."""
    bin_mtime_ns: int
    """The ``.bin``'s ``mtime_ns``."""

    def file_identity(self) -> OrderedDict[str, OrderedDict[str, object]]:
        """Exactly what :func:`tokenloom.format.identity.file_identity` returns for
        these files while they are unchanged."""
        idx: OrderedDict[str, object] = OrderedDict(
            [
                ("size", self.idx_stat[0]),
                ("mtime_ns", self.idx_stat[1]),
                (DIGEST_NAME, self.idx_digest),
            ]
        )
        bin_: OrderedDict[str, object] = OrderedDict(
            [("size", self.bin_size), ("mtime_ns", self.bin_mtime_ns)]
        )
        return OrderedDict([("idx", idx), ("bin", bin_)])

    def unchanged(self) -> bool:
        """Whether the ``.idx`` still has the recorded ``stat`` and the ``.bin`` its
        recorded size and mtime."""
        try:
            bin_stat = os.stat(self.prefix + ".bin")
            return stat_key(os.stat(self.idx_path)) == self.idx_stat and (
                bin_stat.st_size,
                bin_stat.st_mtime_ns,
            ) == (self.bin_size, self.bin_mtime_ns)
        except OSError:
            return False


class LazyIndexedDataset:
    """An :class:`IndexedDataset` of a pair described by ``facts``, opened on first use.

    Args:
        facts: what is known of the pair.
        mmap, fast_cache_load: as for ``IndexedDataset``.
        index: the pair's ``.idx`` already parsed (serves the index sections until the
            pair is opened).
        opened: the pair already opened (``release()`` closes it, to reopen on use).
    """

    def __init__(
        self,
        facts: PairFacts,
        *,
        mmap: bool = True,
        fast_cache_load: bool = False,
        index: Optional[IndexFile] = None,
        opened: Optional[IndexedDataset] = None,
    ) -> None:
        self.facts = facts
        self.mmap, self.fast_cache_load = bool(mmap), bool(fast_cache_load)
        self._index = index
        self._dataset = opened

    def _guard(self) -> threading.Lock:
        """This dataset's lock, made at its first use (a blend of thousands of prefixes
        opens few of them: a lock each would only be more for the garbage collector to
        walk); ``dict.setdefault`` is atomic, so racing threads get the same one."""
        lock = self.__dict__.get("_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_lock", threading.Lock())
        return lock  # type: ignore[no-any-return]

    # -- known without opening ---------------------------------------------------------
    @property
    def path_prefix(self) -> str:
        """The pair's prefix (known without opening it)."""
        return self.facts.prefix

    @property
    def multimodal(self) -> bool:
        """Always False: a lazily opened pair is a plain (non-multimodal) one."""
        return False

    @property
    def dtype(self) -> type:
        """The token dtype recorded in the ``.idx`` (known without opening the pair)."""
        return DType.dtype_from_code(self.facts.dtype_code)

    @property
    def dtype_code(self) -> int:
        """The ``.idx`` dtype code (known without opening the pair)."""
        return self.facts.dtype_code

    @property
    def sequences_per_dataset(self) -> tuple[int, int]:
        """``(sequence count, document count)`` from the recorded facts."""
        return self.facts.sequence_count, self.facts.document_count

    def __len__(self) -> int:
        """Number of sequences."""
        return self.facts.sequence_count

    def file_identity(self) -> OrderedDict[str, OrderedDict[str, object]]:
        """The identity of the pair (:meth:`PairFacts.file_identity`)."""
        return self.facts.file_identity()

    @property
    def opened(self) -> bool:
        """Whether the pair is open now."""
        return self._dataset is not None

    # -- opening -----------------------------------------------------------------------
    def dataset(self) -> IndexedDataset:
        """The open ``IndexedDataset`` (opened now if needed; FormatError when the
        ``.idx`` changed since the facts were taken)."""
        dataset = self._dataset
        if dataset is not None:
            return dataset
        with self._guard():
            if self._dataset is None:
                facts = self.facts
                if not facts.unchanged():
                    raise FormatError(
                        f"{facts.prefix}.idx/.bin changed after the datasets were built over "
                        "them (size, times or inode differ from start-up); rebuild the datasets"
                    )
                self._dataset = IndexedDataset(
                    facts.prefix,
                    multimodal=False,
                    mmap=self.mmap,
                    fast_cache_load=self.fast_cache_load,
                    sequences_per_dataset=self.sequences_per_dataset,
                    dtype_code=facts.dtype_code,
                )
            return self._dataset

    def release(self) -> None:
        """Close the open pair, if any (arrays handed out stay valid); the next access
        opens it again."""
        if self._dataset is None:
            return  # nothing open (an open racing with this completes as if after it)
        with self._guard():
            dataset, self._dataset = self._dataset, None
        if dataset is not None:
            dataset.close()

    def close(self) -> None:
        """Release the files and the parsed index."""
        self.release()
        self._index = None

    def __enter__(self) -> LazyIndexedDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sections (from the parsed index while unopened) -------------------------------
    @property
    def sequence_lengths(self) -> numpy.ndarray:
        """Length of every sequence; from the parsed ``.idx`` while unopened."""
        if self._dataset is None and self._index is not None:
            return self._index.lengths
        return self.dataset().sequence_lengths

    @property
    def sequence_pointers(self) -> numpy.ndarray:
        """Byte offset of every sequence in the ``.bin``; from the parsed ``.idx`` while unopened."""
        if self._dataset is None and self._index is not None:
            return self._index.pointers
        return self.dataset().sequence_pointers

    @property
    def document_indices(self) -> numpy.ndarray:
        """Megatron's document indices; from the parsed ``.idx`` while unopened."""
        if self._dataset is None and self._index is not None:
            return self._index.documents
        return self.dataset().document_indices

    def get_document_indices(self) -> numpy.ndarray:
        """Megatron's ``get_document_indices()``: the document indices."""
        return self.document_indices

    # -- everything else opens the pair ------------------------------------------------
    @property
    def sequence_modes(self) -> Optional[numpy.ndarray]:
        """The multimodal sequence modes (opens the pair)."""
        return self.dataset().sequence_modes

    @property
    def tokens(self) -> Optional[numpy.ndarray]:
        """The ``.bin``'s tokens as one array, where the reader maps it (opens the pair)."""
        return self.dataset().tokens

    @property
    def bin_reader(self) -> Any:
        """The pair's ``.bin`` reader (opens the pair)."""
        return self.dataset().bin_reader

    @property
    def closed(self) -> bool:
        """Whether the pair is not open (never opened, or closed since)."""
        return self._dataset is None or self._dataset.closed

    def set_document_indices(self, document_indices: numpy.ndarray) -> None:
        """Megatron's ``set_document_indices()``, on the opened pair."""
        self.dataset().set_document_indices(document_indices)

    def get(self, idx: int, offset: int = 0, length: Optional[int] = None) -> Any:
        """Megatron's ``get(idx, offset, length)``: part of sequence ``idx`` (opens the pair)."""
        return self.dataset().get(idx, offset, length)

    def __getitem__(self, idx: Union[int, slice]) -> Any:
        return self.dataset()[idx]

    def __iter__(self) -> Iterator[numpy.ndarray]:
        return iter(self.dataset())

    @staticmethod
    def exists(path_prefix: str) -> bool:
        """Whether both files of ``path_prefix`` exist (``IndexedDataset.exists``)."""
        return IndexedDataset.exists(path_prefix)

    def __repr__(self) -> str:
        state = "open" if self.opened else "not opened"
        return (
            f"LazyIndexedDataset({self.path_prefix!r}, dtype={numpy.dtype(self.dtype).name}, "
            f"sequences={len(self)}, {state})"
        )

    # -- pickling: stay lazy in the receiving process ----------------------------------
    def __getstate__(self) -> dict[str, object]:
        return {"facts": self.facts, "mmap": self.mmap, "fast_cache_load": self.fast_cache_load}

    def __setstate__(self, state: dict[str, Any]) -> None:
        LazyIndexedDataset.__init__(
            self, state["facts"], mmap=state["mmap"], fast_cache_load=state["fast_cache_load"]
        )
