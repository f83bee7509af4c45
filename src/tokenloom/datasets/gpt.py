"""``GPTDataset``: megatron-core 0.16.1's GPT dataset, same indices and samples.

Three index arrays drive it (see ``_gpt_indices``): ``document_index`` (the exposed
documents repeated for enough epochs and shuffled), ``sample_index`` (where each sample
starts: position in ``document_index`` and token offset) and ``shuffle_index`` (the
order samples are served in). They are held by a
:class:`~tokenloom.cache.indices.CachedIndices` and cached through
:mod:`tokenloom.cache` under a key that covers every input that shapes them. What a
warm start already knows (the key, the cached sample count) comes in through the
small :class:`WarmStart` interface that the builder's start-up shortcut implements
(:mod:`tokenloom.builder.startup`); the dataset itself holds Megatron's semantics only.

Beyond megatron-core: a split without documents raises ConfigError at once (megatron
loops forever); a missing cache raises CacheError unless ``build_if_missing``; a
corrupt cache is rebuilt or reported, never used; ``get_batch`` fills preallocated
``[B, seq]`` arrays for many samples at once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

import numpy

from tokenloom.cache import CacheKey, IndexCache, array_digest
from tokenloom.cache.indices import CachedIndices
from tokenloom.datasets import _gpt_indices
from tokenloom.datasets._batch import BatchInputs, get_batch
from tokenloom.datasets._gpt_low_level import (
    checked_indices,
    data_identity,
    default_cache_dir,
    open_low_level,
    sequence_count,
)
from tokenloom.datasets._gpt_sibling import SiblingMixin
from tokenloom.datasets._hooks import INDEX_NAMES, SIZE_HOOKS, IndexArrays, MegatronHooks
from tokenloom.datasets._ranges import AttributionPool, ranges_of_positions, wants_ranges
from tokenloom.datasets._sample import SampleMaker, TokenSource
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.datasets.megatron_dataset import MegatronDataset, tokenizer_identity
from tokenloom.datasets.split import Split, split_document_range
from tokenloom.errors import CacheError, ConfigError
from tokenloom.format import IndexedDataset
from tokenloom.index.validate import sample_position

__all__ = ["GPTDataset", "INDEX_NAMES", "WarmStart"]

logger = logging.getLogger(__name__)


class WarmStart(Protocol):
    """What a start already knows of a GPT dataset's cached indices (the builder passes
    one, see :mod:`tokenloom.builder.startup`; both answers must equal what a full
    computation would give, or be None)."""

    def cache_key(self, dataset: GPTDataset) -> Optional[CacheKey]:
        """The dataset's cache key, without building its identifiers; None: not known."""

    def known_length(self, key: CacheKey) -> Optional[int]:
        """Samples of the entry cached under ``key``, when recorded; else None."""


class GPTDataset(IndexArrays, MegatronHooks, SiblingMixin, MegatronDataset):
    """The GPT dataset (megatron-core's ``GPTDataset`` arguments, in order).

    Args:
        indexed_dataset: the low-level dataset (``IndexedDataset``).
        dataset_path: its path prefix, for bookkeeping.
        indexed_indices: the document (sequence) ids of this split; ``None`` only with
            ``fast_cache_load``, when the indices must come from the cache.
        num_samples: minimum number of samples; ``None`` for exactly one epoch.
        index_split: the split.
        config: a :class:`GPTDatasetConfig`.
        build_if_missing: build (and cache) the indices when the cache lacks them. When
            False a missing cache raises CacheError naming the missing file: ranks that
            must only read a cache another rank built pass False.
        index_cache: the cache to use instead of ``IndexCache(<cache directory>)`` (the
            builder passes one that packs small entries into one file).
        warm_start: what a warm start already knows (the builder passes it); None
            computes everything.

    Subclasses may override megatron-core's hooks (``_query_document_sample_shuffle_indices``,
    ``_build_document_sample_shuffle_indices``, ``_get_num_tokens_per_epoch``,
    ``_get_num_epochs``): they are then called where megatron-core calls them
    (:mod:`tokenloom.datasets._hooks`).
    """

    config: GPTDatasetConfig
    copies_siblings = True
    """:meth:`sibling` copies this class's instances (not a subclass's)."""

    def __init__(
        self,
        indexed_dataset: Any,
        dataset_path: Optional[str],
        indexed_indices: Optional[numpy.ndarray],
        num_samples: Optional[int],
        index_split: Split,
        config: GPTDatasetConfig,
        *,
        build_if_missing: bool = True,
        index_cache: Optional[IndexCache] = None,
        warm_start: Optional[WarmStart] = None,
    ) -> None:
        if not isinstance(config, GPTDatasetConfig):
            raise ConfigError(f"config must be a GPTDatasetConfig, got {type(config).__name__}")
        if indexed_indices is not None:
            indexed_indices = checked_indices(indexed_dataset, indexed_indices)
        super().__init__(
            indexed_dataset, dataset_path, indexed_indices, num_samples, index_split, config
        )
        if config.shuffle_mode != "exact":  # exact: megatron-core's description, unchanged
            self.unique_identifiers["shuffle_mode"] = config.shuffle_mode
        self.build_if_missing = bool(build_if_missing)
        self.masks_and_position_ids_are_cacheable = not any(
            [config.reset_position_ids, config.reset_attention_mask, config.eod_mask_loss]
        )
        self._source: Optional[TokenSource] = None
        self._maker: Optional[SampleMaker] = None
        self._batch_inputs: Optional[BatchInputs] = None
        self._length: Optional[int] = None
        self.cache: Optional[IndexCache] = None
        self.cache_key: Optional[CacheKey] = None
        subclass = type(self) is not GPTDataset  # GPTDataset itself overrides no hook
        self._sample_hook = subclass and self.overrides("_query_document_sample_shuffle_indices")
        self._ranges = wants_ranges(config)
        self.attribution_pool = AttributionPool() if self._ranges else None  # ranges' arrays
        self._plain = not (self._sample_hook or self._ranges)  # dataset[i]'s hot path
        self._size_hooks = subclass and any(self.overrides(name) for name in SIZE_HOOKS)
        self._pending_cache = (index_cache, warm_start)
        if subclass and self.overrides("_build_document_sample_shuffle_indices"):
            self.cached_indices = self._given_indices(self._build_document_sample_shuffle_indices())
        else:
            self.cached_indices = self.cached_indices_from_cache()
        self._pending_cache = (None, None)  # the builder's cache and warm start: used once

    # -- low-level dataset -----------------------------------------------------------
    @staticmethod
    def numel_low_level_dataset(low_level_dataset: Any) -> int:
        """GPT splits a low-level dataset by sequence (``sequence_lengths.shape[0]``; a
        ``.bin``/``.idx`` dataset's ``len()``, its header count)."""
        return sequence_count(low_level_dataset)

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config: GPTDatasetConfig) -> IndexedDataset:
        """Open ``dataset_path`` as an ``IndexedDataset`` as the config asks."""
        return open_low_level(dataset_path, config)

    # -- identity and cache ----------------------------------------------------------
    @property
    def cache_identifiers(self) -> OrderedDict[str, Any]:
        """Megatron's identifiers plus everything else that shapes the indices."""
        identifiers = OrderedDict(self.unique_identifiers)
        if "tokenizer" in identifiers:
            identifiers["tokenizer"] = tokenizer_identity(self.config.tokenizer)
        identifiers["add_extra_token_to_sequence"] = bool(self.config.add_extra_token_to_sequence)
        identifiers["drop_last_partial_sequence"] = self._drop_last_partial_sequence()
        identifiers["sequence_count"] = self.numel_low_level_dataset(self.dataset)
        identifiers["data"] = data_identity(self.dataset)
        return identifiers

    @property
    def drop_last_partial_sequence(self) -> bool:
        """Whether the last partial sample is dropped (always, except for a valid split
        with ``drop_last_partial_validation_sequence=False``)."""
        return self._drop_last_partial_sequence()

    def _drop_last_partial_sequence(self) -> bool:
        if self.index_split == Split.valid:
            return bool(self.config.drop_last_partial_validation_sequence)
        return True

    def cached_indices_from_cache(self) -> CachedIndices:
        """The indices from tokenloom's index cache: loaded or built now, or deferred
        (``defer_npy_index_mmap`` over an existing entry, or a warm start that knows the
        entry's length). Made once; later calls return the same holder."""
        held = self.__dict__.get("_from_cache")
        if held is None:
            held = self._from_cache = self._acquire_indices(*self._pending_cache)
        return held

    def _acquire_indices(
        self, index_cache: Optional[IndexCache], warm_start: Optional[WarmStart]
    ) -> CachedIndices:
        directory = default_cache_dir(self.config, self.dataset, type(self).__name__)
        verify = "size" if self.config.fast_cache_load else "checksum"
        checks = None if self.indices is None else _indices_checks  # digested on first use
        cache = (
            index_cache if index_cache is not None or directory is None else IndexCache(directory)
        )
        key = None
        if cache is not None:
            key = warm_start.cache_key(self) if warm_start is not None else None
            key = key or CacheKey(
                type(self).__name__, self.index_split.name, self.cache_identifiers
            )
            self.cache, self.cache_key = cache, key
        cls = type(self)  # its functions, called with self: no bound method per dataset
        held = CachedIndices(
            INDEX_NAMES,
            cache,
            key,
            cls._build,
            cls._where,
            checks=checks,
            verify=verify,
            can_build=self.build_if_missing and self.indices is not None,
            validate=_gpt_indices.check_sample_count,
            wrap=_gpt_indices.serve_bijection if self.config.shuffle_mode == "bijection" else None,
            owner=self,
        )
        known = None if warm_start is None or key is None else warm_start.known_length(key)
        if (
            cache is not None
            and key is not None
            and self.config.defer_npy_index_mmap
            and cache.exists(key, INDEX_NAMES)
        ):
            held.defer(verify="size")
        elif known is not None:
            held.defer(
                verify=verify, expected_length=known, rebuild=True, length_of="shuffle_index"
            )
            self._length = known
        else:
            held.load_or_build()
        return held

    def _where(self) -> str:
        """Names this split and, when the config's split matrix gives it, its range."""
        where = (
            f"{type(self).__name__} {self.index_split.name} split of "
            f"{self.dataset_path or type(self.dataset).__name__}"
        )
        matrix = self.config.split_matrix
        bounds = None if matrix is None else matrix[self.index_split.value]
        if bounds is not None:
            begin, end = split_document_range(bounds, self.numel_low_level_dataset(self.dataset))
            where += f" (split {self.config.split!r} gives documents [{begin}, {end}))"
        return where

    def _plan(self) -> _gpt_indices.EpochPlan:
        return _gpt_indices.plan_of(self)

    def _build(self) -> dict[str, numpy.ndarray]:
        if self.indices is None:
            raise CacheError(
                "indexed_indices is None (fast_cache_load) and the index cache is "
                "missing; build the cache first or pass the split's indices"
            )
        plan = self._plan()
        try:
            arrays = _gpt_indices.build_indices(
                self.dataset.sequence_lengths,
                self.indices,
                plan,
                self.config.sequence_length,
                int(self.config.add_extra_token_to_sequence),
                self.config.random_seed,
                self.config.shuffle_mode,
            )
        except MemoryError as error:
            raise ConfigError(
                f"{self._where()}: num_samples={self.num_samples} with sequence_length="
                f"{self.config.sequence_length} needs {plan.num_epochs} epochs of "
                f"{self.indices.size} documents, and the indices do not fit in memory "
                f"({error}); ask for fewer samples or a shorter sequence_length"
            ) from None
        return dict(zip(INDEX_NAMES, arrays))

    # -- the three indices -----------------------------------------------------------
    def _index(self, name: str) -> numpy.ndarray:
        return self.cached_indices.arrays()[name]

    @property
    def indices_loaded(self) -> bool:
        """Whether the index arrays are in memory/mmapped (False while deferred)."""
        return self.cached_indices.loaded

    def __len__(self) -> int:
        if self._length is None:
            if not self.cached_indices.loaded and self.indices is not None:
                plan = self._plan()
                self._length = plan.total_samples(
                    self.config.sequence_length, int(self.config.add_extra_token_to_sequence)
                )
            else:
                self._length = int(self.shuffle_index.shape[0])
        return self._length

    # -- samples ---------------------------------------------------------------------
    def sampler(self) -> tuple[TokenSource, SampleMaker]:
        """This dataset's token reader and sample maker (made once, rebuilt after
        unpickling): what every sample path reads documents and builds fields with."""
        if self._maker is None or self._source is None:
            self._source = TokenSource(self.dataset)
            self._maker = SampleMaker(self.config, self._pad_token_id, self._source)
        return self._source, self._maker

    def __getitem__(self, idx: Optional[int]) -> dict[str, numpy.ndarray]:
        """One sample: tokens, labels, [attention_mask], loss_mask, position_ids.

        ``None`` gives a batch-padding sample (sample 0 with an all-zero loss mask).
        """
        maker = self._maker
        if self._plain and maker is not None and maker.bound is self.cached_indices.arrays():
            return maker.fetch(idx)  # type: ignore[misc]  # bound: fetch is set
        return self._sample_slowly(idx)

    def _sample_slowly(self, idx: Optional[int]) -> dict[str, numpy.ndarray]:
        """``self[idx]`` off the hot path: a subclass's samples, the first sample after
        (re)loading the indices, or with ``return_document_ranges``."""
        if self._sample_hook:
            sample = self.sample_from_hook(idx)
        else:
            maker, arrays = self._maker, self.cached_indices.arrays()
            if maker is None or maker.bound is not arrays:
                source, maker = self.sampler()
                maker.bind(
                    source,
                    arrays["document_index"],
                    arrays["sample_index"],
                    arrays["shuffle_index"],
                    len(self),
                    arrays,
                )
            sample = maker.fetch(idx)  # type: ignore[misc]  # bound just above
        if self._ranges:
            position = -1 if idx is None else sample_position(idx, len(self))
            sample["document_ranges"] = self.document_ranges([position])[1]
        return sample

    def document_ranges(self, positions: Sequence[int]) -> tuple[numpy.ndarray, numpy.ndarray]:
        """``(offsets, ranges)``: the ``(document id, token start, token end)`` rows of
        samples ``positions`` (``-1``: a padding sample, no rows), CSR as
        :func:`tokenloom.index.ranges.sample_ranges` gives them."""
        return ranges_of_positions(self, numpy.asarray(positions, dtype=numpy.int64))

    def document_range_width(self) -> int:
        """Width of this dataset's batch ``document_ranges`` (most parts of a sample)."""
        return self.batch_inputs().range_width()

    def batch_inputs(self) -> BatchInputs:
        """What the batch kernel needs for the current index arrays (checked against the
        documents once, then reused until the indices are reloaded)."""
        arrays = self.cached_indices.arrays()
        inputs = self._batch_inputs
        if inputs is None or inputs.bound is not arrays:
            source, maker = self.sampler()
            inputs = self._batch_inputs = BatchInputs(source, maker, arrays, len(self))
            if self.samples_by_hook() or self.config.inter_document_masking:
                inputs.kernel_args = None  # rows from self[i]: a hook's, main's positions
        return inputs

    def get_batch(
        self, indices: Sequence[Optional[int]], out: Optional[Mapping[str, numpy.ndarray]] = None
    ) -> dict[str, numpy.ndarray]:
        """Fill ``[B, seq]`` arrays (tokens, labels, loss_mask, position_ids) for many samples.

        Same values as stacking ``self[i]`` (``None`` entries are padding samples); no
        attention mask or cu_seqlens. ``out`` (optional) supplies the arrays to fill.
        """
        return get_batch(self, indices, out)

    def __repr__(self) -> str:
        """What this dataset is: prefix, split, samples, epochs, documents, sequence length
        (cheap: the epochs come from the loaded indices or from the plan, nothing is built)."""
        documents = None if self.indices is None else int(self.indices.shape[0])
        try:
            samples: Any = len(self)
            if self.cached_indices.loaded and documents:
                epochs: Any = int(self.document_index.shape[0]) // documents
            else:
                epochs = self._plan().num_epochs if documents is not None else "?"
        except (ConfigError, CacheError):
            samples = epochs = "?"
        return (
            f"{type(self).__name__}(prefix={self.dataset_path!r}, "
            f"split={self.index_split.name}, samples={samples}, epochs={epochs}, "
            f"documents={documents}, sequence_length={self.config.sequence_length})"
        )

    # -- pickling (DataLoader workers) -------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_source"] = state["_maker"] = state["_batch_inputs"] = None  # rebuilt in the worker
        return state


def _indices_checks(dataset: GPTDataset) -> dict[str, object]:
    """What a GPT entry is stored with and checked against: its split's document ids
    (called only for a dataset that has them)."""
    indices = dataset.indices
    if indices is None:
        raise CacheError(f"{dataset._where()}: no document ids to check the cache against")
    return {"indices": array_digest(indices)}
