"""``IndexedDataset``: read a Megatron ``.bin``/``.idx`` pair.

Opening is cheap: the ``.idx`` is memory-mapped once, the header is parsed with
``struct`` and the three (four) sections become ``numpy.frombuffer`` views; only
O(1) size checks and one vectorised pass over the document index run at open.
Every array handed out (index sections, token views) keeps its mapping alive, so
it stays valid after :meth:`IndexedDataset.close` or garbage collection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Optional, Union

import numpy

from tokenloom.errors import FormatError
from tokenloom.format import remote
from tokenloom.format.bin_readers import BinReader
from tokenloom.format.index_file import IndexFile, check_document_indices
from tokenloom.format.index_view import IndexView
from tokenloom.format.local_pair import check_back_to_back, check_bin_size, open_local
from tokenloom.format.open_checks import run_open_checks
from tokenloom.format.opened_identity import (
    Identity,
    changed_since_pickled,
    local_bin_stat,
    opened_identity,
)
from tokenloom.format.read_checks import (
    IndexOutOfRangeError,
    bad_read,
    checked_span,
    negative_length,
    sequence_position,
)
from tokenloom.format.spec import get_bin_path, get_idx_path


def _open_pair(
    path_prefix: str,
    multimodal: bool,
    mmap: bool,
    object_storage_config: Any,
    fast_cache_load: bool,
    sequences_per_dataset: Optional[tuple[int, int]],
    dtype_code: Optional[int],
) -> tuple[IndexFile, BinReader]:
    """The ``.idx`` and a ``.bin`` reader: through :mod:`tokenloom.storage` for ``s3://``
    and ``msc://`` prefixes, from the local files otherwise."""
    if remote.is_remote(path_prefix):
        return remote.open_remote(
            path_prefix,
            multimodal,
            mmap,
            object_storage_config,
            sequences_per_dataset,
            dtype_code,
            not fast_cache_load,
        )
    return open_local(
        path_prefix,
        multimodal,
        mmap,
        object_storage_config,
        sequences_per_dataset,
        dtype_code,
        fast_cache_load,
    )


class IndexedDataset:
    """A tokenised corpus stored as a Megatron ``.bin``/``.idx`` pair.

    Args:
        path_prefix: path of the pair without the ``.bin``/``.idx`` suffix.
        multimodal: whether the ``.idx`` carries a mode per sequence; items are then
            ``(tokens, mode)`` pairs, as in Megatron.
        mmap: memory-map the ``.bin`` (default) or read it with a file pointer.
        object_storage_config: for ``s3://``/``msc://`` prefixes (an
            :class:`tokenloom.storage.ObjectStorageConfig`, megatron-core's, or a dict); these
            are read through :mod:`tokenloom.storage` whatever ``mmap`` says.
        s3_config: deprecated alias of ``object_storage_config``.
        fast_cache_load: trust the document index (skip its O(D) monotonicity pass).
        sequences_per_dataset: ``(sequence_count, document_count)`` known in advance; they
            are checked against the header, which is already mapped, so it costs nothing.
        dtype_code: the expected dtype code (checked against the header when given).
    """

    def __init__(
        self,
        path_prefix: str,
        multimodal: bool = False,
        mmap: bool = True,
        object_storage_config: Any = None,
        s3_config: Any = None,
        fast_cache_load: bool = False,
        sequences_per_dataset: Optional[tuple[int, int]] = None,
        dtype_code: Optional[int] = None,
    ) -> None:
        self._open(
            os.fspath(path_prefix) if not isinstance(path_prefix, str) else path_prefix,
            bool(multimodal),
            bool(mmap),
            object_storage_config or s3_config,
            bool(fast_cache_load),
            sequences_per_dataset,
            dtype_code,
        )

    def _open(
        self,
        path_prefix: str,
        multimodal: bool,
        mmap: bool,
        object_storage_config: Any,
        fast_cache_load: bool,
        sequences_per_dataset: Optional[tuple[int, int]],
        dtype_code: Optional[int],
    ) -> None:
        self.path_prefix = path_prefix
        self.multimodal = multimodal
        self.mmap = mmap
        self.object_storage_config = object_storage_config
        self.fast_cache_load = fast_cache_load
        self.sequences_per_dataset = sequences_per_dataset
        self.dtype_code = dtype_code
        index, reader = _open_pair(
            path_prefix,
            multimodal,
            mmap,
            object_storage_config,
            fast_cache_load,
            sequences_per_dataset,
            dtype_code,
        )
        self._index: Optional[IndexFile] = index
        self.bin_reader = reader
        self.dtype = index.header.dtype
        self._itemsize = numpy.dtype(self.dtype).itemsize
        self._count = index.header.sequence_count
        self._lengths: Optional[numpy.ndarray] = index.lengths
        self._pointers: Optional[numpy.ndarray] = index.pointers
        self._bin_size = reader.size
        check_bin_size(index, reader, self._itemsize)
        run_open_checks(index, reader.size, reader.path, self._itemsize, fast_cache_load)
        self._identity: Optional[Identity] = None
        self._bin_stat = local_bin_stat(path_prefix, object_storage_config)

    # -- identity -----------------------------------------------------------------------
    def file_identity(self) -> Optional[Identity]:
        """The identity (:func:`tokenloom.format.identity.file_identity`) of the pair as
        opened here: the ``.idx`` digest of the mapped bytes, sizes and mtimes taken at
        open (object storage: ``.idx`` digest and size, ``.bin`` size and ETag)."""
        if self._identity is None and remote.is_remote(self.path_prefix):
            self._identity = remote.remote_identity(self._index, self.bin_reader)
        if self._identity is None:
            self._identity = opened_identity(self._index, self._bin_stat)
        return self._identity

    # -- pickling: reopen the files in the receiving process -------------------------
    def __getstate__(self) -> dict[str, object]:
        """Pickle the constructor arguments and the file identity; the files are
        reopened on load, and must still be the same."""
        return {
            "path_prefix": self.path_prefix,
            "multimodal": self.multimodal,
            "mmap": self.mmap,
            "object_storage_config": self.object_storage_config,
            "fast_cache_load": self.fast_cache_load,
            "sequences_per_dataset": self.sequences_per_dataset,
            "dtype_code": self.dtype_code,
            "identity": self.file_identity(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen the pair described by ``state``; FormatError naming the file when it is
        no longer the one pickled (regenerated or edited since)."""
        state = dict(state)
        pickled = state.pop("identity", None)
        self._open(**state)
        if pickled is None:
            return
        error = changed_since_pickled(self.path_prefix, pickled, self.file_identity())
        if error is not None:
            self.close()
            raise error

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Release the files. Arrays already handed out remain valid."""
        if self._index is None:
            return
        self._lengths = self._pointers = None
        self._index.close()
        self.bin_reader.close()
        self._index = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._index is None

    def __enter__(self) -> IndexedDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live_index(self) -> IndexFile:
        if self._index is None:
            raise FormatError(f"{self.path_prefix}: IndexedDataset is closed")
        return self._index

    def _live_modes(self) -> numpy.ndarray:
        modes = self._live_index().modes
        if modes is None:  # a multimodal .idx always has its mode section
            raise FormatError(f"{self.path_prefix}.idx: no sequence modes in a multimodal index")
        return modes

    # -- sizes and index sections ---------------------------------------------------
    def __len__(self) -> int:
        """Number of sequences."""
        return self._count

    @property
    def sequence_lengths(self) -> numpy.ndarray:
        """int32 number of tokens of each sequence (read-only)."""
        return self._live_index().lengths

    @property
    def sequence_pointers(self) -> numpy.ndarray:
        """int64 byte offset of each sequence in the ``.bin`` (read-only)."""
        return self._live_index().pointers

    @property
    def document_indices(self) -> numpy.ndarray:
        """int64 sequence index where each document starts, leading 0, last = len(self)."""
        return self._live_index().documents

    def get_document_indices(self) -> numpy.ndarray:
        """Megatron's accessor for :attr:`document_indices`."""
        return self.document_indices

    def set_document_indices(self, document_indices: numpy.ndarray) -> None:
        """Replace the document index in memory (Megatron compatibility)."""
        self._live_index().documents = numpy.asarray(document_indices, dtype=numpy.int64)

    @property
    def index(self) -> IndexView:
        """The ``.idx`` as megatron-core's ``_IndexReader`` presents it (``sequence_lengths``,
        ``sequence_pointers``, ``document_indices``, ``sequence_modes``, ``dtype``,
        ``dtype_size``, ``len()``, ``index[i] -> (pointer, length, mode)``)."""
        return IndexView(self._live_index())

    def initialize(
        self,
        path_prefix: str,
        multimodal: bool,
        mmap: bool,
        object_storage_config: Any,
        fast_cache_load: bool = False,
        sequences_per_dataset: Optional[tuple[int, int]] = None,
        dtype_code: Optional[int] = None,
    ) -> None:
        """(Re)open the pair at ``path_prefix`` (megatron-core's ``initialize``)."""
        self._open(
            os.fspath(path_prefix),
            bool(multimodal),
            bool(mmap),
            object_storage_config,
            bool(fast_cache_load),
            sequences_per_dataset,
            dtype_code,
        )

    @property
    def sequence_modes(self) -> Optional[numpy.ndarray]:
        """int8 mode of each sequence, or None when the dataset is not multimodal."""
        return self._live_index().modes

    @property
    def tokens(self) -> Optional[numpy.ndarray]:
        """1-D read-only view of the whole ``.bin`` (mmap mode; mapped again if the pool
        evicted it), None for other readers (and a refused mapping). Hold it only while
        reading: a held view keeps its mapping alive past eviction."""
        self._live_index()
        return self.bin_reader.tokens(self.dtype)

    @staticmethod
    def exists(path_prefix: str) -> bool:
        """Whether both ``.idx`` and ``.bin`` exist at ``path_prefix`` (also s3://, msc://)."""
        if remote.is_remote(path_prefix):
            return remote.remote_exists(path_prefix)
        return os.path.isfile(get_idx_path(path_prefix)) and os.path.isfile(
            get_bin_path(path_prefix)
        )

    # -- reading ----------------------------------------------------------------------
    def _read(self, pointer: int, count: int) -> numpy.ndarray:
        self._live_index()
        tokens = self.bin_reader.tokens(self.dtype)
        start, misaligned = divmod(pointer, self._itemsize)
        if tokens is None:
            size = self._bin_size
            if (
                misaligned
                or pointer < 0
                or count < 0
                or (size is not None and pointer + count * self._itemsize > size)
            ):
                raise bad_read(self.path_prefix, pointer, count, size)
            return self.bin_reader.read(self.dtype, count, pointer)
        out = tokens[start : start + count]
        if misaligned or pointer < 0 or out.shape[0] != count:
            raise bad_read(self.path_prefix, pointer, count, tokens.nbytes)
        if pointer + count * self._itemsize > self.bin_reader.guard_from:
            self.bin_reader.verify_size()  # the mapping's tail, or shrunk: docs/reliability.md
        return out

    def get(
        self, idx: int, offset: int = 0, length: Optional[int] = None
    ) -> Union[numpy.ndarray, tuple[numpy.ndarray, Any]]:
        """Tokens ``[offset, offset + length)`` of sequence ``idx`` (to its end by default).

        Returns an ndarray, or ``(ndarray, mode)`` for multimodal datasets.
        """
        i = sequence_position(self.path_prefix, idx, self._count)
        lengths, pointers = self._lengths, self._pointers
        if lengths is None or pointers is None:
            index = self._live_index()
            lengths, pointers = index.lengths, index.pointers
        offset, length = checked_span(self.path_prefix, idx, i, int(lengths[i]), offset, length)
        tokens = self._read(int(pointers[i]) + offset * self._itemsize, length)
        if self.multimodal:
            return tokens, self._live_modes()[i]
        return tokens

    def __getitem__(self, idx: Union[int, slice]) -> Any:
        """``ds[i]``: one sequence (ndarray, or ``(tokens, mode)`` when multimodal);
        ``ds[a:b]``: list of sequences (``(list, modes)`` when multimodal)."""
        if isinstance(idx, slice):
            return self._slice(idx)
        return self.get(idx)

    def _slice(
        self, idx: slice
    ) -> Union[list[numpy.ndarray], tuple[list[numpy.ndarray], numpy.ndarray]]:
        start, stop, step = idx.indices(self._count)
        if step != 1:
            raise FormatError(
                f"{self.path_prefix}: slices must be contiguous (step 1), got step {step}"
            )
        index = self._live_index()
        stop = max(start, stop)
        lengths = index.lengths[start:stop]
        if stop > start and int(lengths.min()) < 0:
            at = start + int(numpy.argmin(lengths))
            raise negative_length(self.path_prefix, at, int(index.lengths[at]))
        if stop > start:
            check_back_to_back(
                self.path_prefix, index.pointers[start:stop], lengths, self._itemsize, start
            )
            flat = self._read(int(index.pointers[start]), int(lengths.sum(dtype=numpy.int64)))
            sequences: list[numpy.ndarray] = numpy.split(flat, numpy.cumsum(lengths[:-1]))
        else:
            sequences = []
        if self.multimodal:
            return sequences, self._live_modes()[start:stop]
        return sequences

    def __iter__(self) -> Iterator[Any]:
        """Iterate over all sequences in order."""
        for i in range(self._count):
            yield self.get(i)

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.path_prefix!r}, dtype={numpy.dtype(self.dtype).name}, "
            f"sequences={self._count}, multimodal={self.multimodal})"
        )


__all__ = ["IndexedDataset", "IndexFile", "IndexOutOfRangeError", "check_document_indices"]
