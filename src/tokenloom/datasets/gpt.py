"""``GPTDataset``: megatron-core 0.16.1's GPT dataset, same indices and samples.

Three index arrays drive it (see ``_gpt_indices``): ``document_index`` (the exposed
documents repeated for enough epochs and shuffled), ``sample_index`` (where each sample
starts: position in ``document_index`` and token offset) and ``shuffle_index`` (the
order samples are served in). They are cached through :mod:`tokenloom.cache` under a
key that covers every input that shapes them.

Beyond megatron-core: a split without documents raises ConfigError at once (megatron
loops forever); a missing cache raises CacheError unless ``build_if_missing``; a
corrupt cache is rebuilt or reported, never used; ``get_batch`` fills preallocated
``[B, seq]`` arrays for many samples at once.
"""

from __future__ import annotations

import copy
import logging
import os
from collections import OrderedDict
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy

from tokenloom.cache import CacheKey, IndexCache, array_digest, describe, file_identity, json_scalar
from tokenloom.datasets import _gpt_indices
from tokenloom.datasets._deferred import DeferredIndexedDataset
from tokenloom.datasets._sample import SampleMaker, TokenSource
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.datasets.megatron_dataset import MegatronDataset, tokenizer_identity
from tokenloom.datasets.split import Split, split_document_range
from tokenloom.errors import CacheError, ConfigError

__all__ = ["GPTDataset", "INDEX_NAMES"]

logger = logging.getLogger(__name__)

INDEX_NAMES = ("document_index", "sample_index", "shuffle_index")
_UNIQUE_KEYS = ("class", "dataset_path", "num_samples", "index_split", "random_seed",
                "sequence_length", "split", "split_matrix", "tokenizer")


_MIDDLES: Dict[tuple, tuple] = {}


def _middle_description(ids: Mapping[str, Any], config: GPTDatasetConfig, drop_last: bool) -> str:
    """The config part of a GPT cache description (the same for every prefix of a blend),
    remembered by the exact values it is made of; the tokenizer identity is compared by
    value (a copy is kept), so a changed tokenizer is never described by an old text."""
    tokenizer = tokenizer_identity(config.tokenizer)
    extra = bool(config.add_extra_token_to_sequence)
    try:  # repr tells 4096 from 4096.0, True and numpy.int64(4096): a type change misses
        key = (repr((ids["random_seed"], ids["sequence_length"], ids["split"],
                     ids["split_matrix"])), extra, drop_last)
        known = _MIDDLES.get(key)
        if known is not None and type(known[0]) is type(tokenizer) and known[0] == tokenizer:
            return known[1]
    except (TypeError, ValueError):  # unhashable or incomparable values: no memo
        key = None
    text = describe({
        "random_seed": ids["random_seed"], "sequence_length": ids["sequence_length"],
        "split": ids["split"], "split_matrix": ids["split_matrix"], "tokenizer": tokenizer,
        "add_extra_token_to_sequence": extra, "drop_last_partial_sequence": drop_last})
    if key is not None and len(_MIDDLES) < 256:
        try:
            _MIDDLES[key] = (copy.deepcopy(tokenizer), text)
        except Exception:  # noqa: BLE001 - an identity that cannot be copied: no memo
            pass
    return text


class _Where:
    """``str()`` gives ``dataset._where()``, built only when an error message needs it."""

    __slots__ = ("dataset",)

    def __init__(self, dataset: "GPTDataset") -> None:
        self.dataset = dataset

    def __str__(self) -> str:
        return self.dataset._where()

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


class GPTDataset(MegatronDataset):
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
    """

    def __init__(self, indexed_dataset: Any, dataset_path: Optional[str],
                 indexed_indices: Optional[numpy.ndarray], num_samples: Optional[int],
                 index_split: Split, config: GPTDatasetConfig, *,
                 build_if_missing: bool = True) -> None:
        if not isinstance(config, GPTDatasetConfig):
            raise ConfigError(f"config must be a GPTDatasetConfig, got {type(config).__name__}")
        if indexed_indices is not None:
            indexed_indices = self._checked_indices(indexed_dataset, indexed_indices)
        super().__init__(indexed_dataset, dataset_path, indexed_indices, num_samples,
                         index_split, config)
        self.build_if_missing = bool(build_if_missing)
        self.masks_and_position_ids_are_cacheable = not any(
            [config.reset_position_ids, config.reset_attention_mask, config.eod_mask_loss])
        self._source: Optional[TokenSource] = None
        self._maker: Optional[SampleMaker] = None
        self._arrays: Optional[Dict[str, numpy.ndarray]] = None
        self._lazy = None
        self._length: Optional[int] = None
        self.cache: Optional[IndexCache] = None
        self.cache_key: Optional[CacheKey] = None
        self._acquire_indices()

    # -- low-level dataset -----------------------------------------------------------
    @staticmethod
    def numel_low_level_dataset(low_level_dataset: Any) -> int:
        """GPT splits a low-level dataset by sequence."""
        if isinstance(low_level_dataset, DeferredIndexedDataset):
            return len(low_level_dataset)  # its header count, without opening it
        return int(low_level_dataset.sequence_lengths.shape[0])

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config: GPTDatasetConfig) -> Any:
        """Open ``dataset_path`` as an ``IndexedDataset`` as the config asks."""
        from tokenloom.format import IndexedDataset

        kwargs = dict(multimodal=False, mmap=config.mmap_bin_files)
        if dataset_path.startswith(("s3://", "msc://")):
            return IndexedDataset(dataset_path, object_storage_config={
                "path_to_idx_cache": config.object_storage_cache_path}, **kwargs)
        return IndexedDataset(dataset_path, fast_cache_load=config.fast_cache_load,
                              sequences_per_dataset=config.sequences_for(dataset_path),
                              dtype_code=None, **kwargs)

    @staticmethod
    def _checked_indices(dataset: Any, indices: Any) -> numpy.ndarray:
        indices = numpy.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise ConfigError(f"indexed_indices must be a 1-D integer array, got "
                              f"{indices.dtype} with shape {indices.shape}")
        count = GPTDataset.numel_low_level_dataset(dataset)
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= count):
            raise ConfigError(f"indexed_indices reach [{int(indices.min())}, "
                              f"{int(indices.max())}] but the dataset has {count} sequences")
        return indices

    # -- identity and cache ----------------------------------------------------------
    def _data_identity(self) -> Any:
        if isinstance(self.dataset, DeferredIndexedDataset):
            return self.dataset.file_identity()  # from the start-up memo, files unopened
        identity = getattr(self.dataset, "unique_identifiers", None)
        if identity is not None:
            return identity
        prefix = getattr(self.dataset, "path_prefix", None)
        if prefix is None or str(prefix).startswith(("s3://", "msc://")):
            return OrderedDict([("class", type(self.dataset).__name__), ("path_prefix", prefix)])
        return file_identity(prefix)

    @property
    def cache_identifiers(self) -> "OrderedDict[str, Any]":
        """Megatron's identifiers plus everything else that shapes the indices."""
        identifiers = OrderedDict(self.unique_identifiers)
        if "tokenizer" in identifiers:
            identifiers["tokenizer"] = tokenizer_identity(self.config.tokenizer)
        identifiers["add_extra_token_to_sequence"] = bool(self.config.add_extra_token_to_sequence)
        identifiers["drop_last_partial_sequence"] = self._drop_last_partial_sequence()
        identifiers["sequence_count"] = self.numel_low_level_dataset(self.dataset)
        identifiers["data"] = self._data_identity()
        return identifiers

    def _cache_key(self) -> CacheKey:
        """``CacheKey(class, split, self.cache_identifiers)``. For a plain GPTDataset over
        a memo-vouched prefix (a warm start) the description is written piece by piece
        instead: the same text (the JSON of a mapping is its members' JSON joined; the
        tests compare both), at a third of the cost of building and encoding the
        identifiers, which were most of a warm start over many prefixes."""
        name, split = type(self).__name__, self.index_split.name
        ids = self.unique_identifiers
        if type(self) is not GPTDataset or tuple(ids) != _UNIQUE_KEYS \
                or not isinstance(self.dataset, DeferredIndexedDataset):
            return CacheKey(name, split, self.cache_identifiers)
        middle = _middle_description(ids, self.config, self._drop_last_partial_sequence())
        data = self.dataset.file_identity_json()  # == describe(self._data_identity())
        text = (f'{{"class":{json_scalar(ids["class"])},"dataset_path":'
                f'{json_scalar(ids["dataset_path"])},"num_samples":'
                f'{json_scalar(ids["num_samples"])},"index_split":'
                f'{json_scalar(ids["index_split"])},{middle[1:-1]},"sequence_count":'
                f'{json_scalar(self.numel_low_level_dataset(self.dataset))},"data":{data}}}')
        return CacheKey.from_description(name, split, text)

    def _drop_last_partial_sequence(self) -> bool:
        if self.index_split == Split.valid:
            return bool(self.config.drop_last_partial_validation_sequence)
        return True

    def _cache_dir(self) -> Optional[str]:
        if self.config.path_to_cache:
            return self.config.path_to_cache
        prefix = getattr(self.dataset, "path_prefix", None)
        if self.config.mock or prefix is None:
            return None
        return os.path.join(prefix, "cache", f"{type(self).__name__}_indices")

    def _acquire_indices(self) -> None:
        directory = self._cache_dir()
        if directory is None:
            self._arrays = self._build()
            return
        cache = IndexCache(directory)
        key = self._cache_key()
        self.cache, self.cache_key = cache, key
        checks = None if self.indices is None else {"indices": array_digest(self.indices)}
        can_build = self.build_if_missing and self.indices is not None
        if self.config.defer_npy_index_mmap and cache.exists(key, INDEX_NAMES):
            self._lazy = cache.lazy(key, INDEX_NAMES, checks=checks)
            return
        if self._defer_by_memo(cache, key, checks):
            return
        self._load_or_build(cache, key, checks, can_build)

    def _defer_by_memo(self, cache: IndexCache, key: CacheKey, checks: Any) -> bool:
        """Defer loading when the start-up memo knows this cache's length (see
        ``_deferred``): the indices are loaded, fully verified, at first use."""
        if not isinstance(self.dataset, DeferredIndexedDataset):
            return False
        length = self.dataset.known_length(key.stem)
        if length is None:
            return False
        verify = "size" if self.config.fast_cache_load else "checksum"
        self._lazy = cache.lazy(key, INDEX_NAMES, verify=verify, checks=checks)
        self._length = self._memo_length = length
        return True

    def _load_or_build(self, cache: IndexCache, key: CacheKey, checks: Any,
                       can_build: bool) -> None:
        verify = "size" if self.config.fast_cache_load else "checksum"
        arrays = cache.lookup(key, INDEX_NAMES, verify=verify, checks=checks,
                              on_corrupt="miss" if can_build else "raise")
        if arrays is None and not can_build:  # raises CacheError naming the missing file
            arrays = cache.load(key, INDEX_NAMES, verify=verify, checks=checks)
        if arrays is None:
            if cache.exists(key, INDEX_NAMES):
                logger.warning("%s: index cache %s is damaged or stale; rebuilding it",
                               self._where(), cache.description_path(key))
            arrays = self._build()
            cache.store(key, arrays, checks=checks)
        self._lazy = cache.lazy(key, INDEX_NAMES, checks=checks)
        self._arrays = {name: numpy.asarray(array) for name, array in arrays.items()}

    def _where(self) -> str:
        """Names this split and, when the config's split matrix gives it, its range."""
        where = (f"{type(self).__name__} {self.index_split.name} split of "
                 f"{self.dataset_path or type(self.dataset).__name__}")
        matrix = self.config.split_matrix
        if matrix is not None and matrix[self.index_split.value] is not None:
            begin, end = split_document_range(matrix[self.index_split.value],
                                              self.numel_low_level_dataset(self.dataset))
            where += f" (split {self.config.split!r} gives documents [{begin}, {end}))"
        return where

    def _plan(self) -> _gpt_indices.EpochPlan:
        where = _Where(self)  # the text is only needed for an error
        return _gpt_indices.plan_epochs(
            self.dataset.sequence_lengths, self.indices, self.num_samples,
            self.config.sequence_length, int(self.config.add_extra_token_to_sequence),
            self._drop_last_partial_sequence(), where)

    def _build(self) -> Dict[str, numpy.ndarray]:
        if self.indices is None:
            raise CacheError("indexed_indices is None (fast_cache_load) and the index cache is "
                             "missing; build the cache first or pass the split's indices")
        plan = self._plan()
        try:
            arrays = _gpt_indices.build_indices(
                self.dataset.sequence_lengths, self.indices, plan,
                self.config.sequence_length, int(self.config.add_extra_token_to_sequence),
                self.config.random_seed)
        except MemoryError as error:
            raise ConfigError(
                f"{self._where()}: num_samples={self.num_samples} with sequence_length="
                f"{self.config.sequence_length} needs {plan.num_epochs} epochs of "
                f"{self.indices.size} documents, and the indices do not fit in memory "
                f"({error}); ask for fewer samples or a shorter sequence_length") from None
        return dict(zip(INDEX_NAMES, arrays))

    # -- the three indices -----------------------------------------------------------
    def _index(self, name: str) -> numpy.ndarray:
        if self._arrays is None:
            if getattr(self, "_memo_length", None) is not None:
                self._load_memo_deferred()
            else:
                self._arrays = {n: numpy.asarray(self._lazy[n]) for n in INDEX_NAMES}
        return self._arrays[name]

    def _load_memo_deferred(self) -> None:
        """First use of indices deferred by the memo: load them (a damaged or missing
        cache is rebuilt like at construction), and check the length the memo gave."""
        can_build = self.build_if_missing and self.indices is not None
        try:
            self._arrays = {n: numpy.asarray(self._lazy[n]) for n in INDEX_NAMES}
        except CacheError:
            if not can_build:
                raise
            self._load_or_build(self.cache, self.cache_key, self._lazy.checks, can_build)
        if int(self._arrays["shuffle_index"].shape[0]) != self._memo_length:
            raise CacheError(
                f"{self._where()}: the index cache {self.cache.description_path(self.cache_key)}"
                f" holds {self._arrays['shuffle_index'].shape[0]} samples but the start-up memo "
                f"recorded {self._memo_length}; delete both from {self.cache.path_to_cache}")

    @property
    def document_index(self) -> numpy.ndarray:
        """int32 document ids, epoch after epoch, shuffled."""
        return self._index("document_index")

    @property
    def sample_index(self) -> numpy.ndarray:
        """``[len + 1, 2]``: (position in document_index, offset) where samples start."""
        return self._index("sample_index")

    @property
    def shuffle_index(self) -> numpy.ndarray:
        """The order in which samples are served."""
        return self._index("shuffle_index")

    @property
    def indices_loaded(self) -> bool:
        """Whether the index arrays are in memory/mmapped (False while deferred)."""
        return self._arrays is not None

    def __len__(self) -> int:
        if self._length is None:
            if self._arrays is None and self.indices is not None:
                plan = self._plan()
                self._length = plan.total_samples(self.config.sequence_length,
                                                  int(self.config.add_extra_token_to_sequence))
            else:
                self._length = int(self.shuffle_index.shape[0])
        return self._length

    # -- samples ---------------------------------------------------------------------
    def _sampler(self):
        if self._maker is None:
            self._source = TokenSource(self.dataset)
            self._maker = SampleMaker(self.config, self._pad_token_id, self._source)
        return self._source, self._maker

    def __getitem__(self, idx: Optional[int]) -> Dict[str, numpy.ndarray]:
        """One sample: tokens, labels, [attention_mask], loss_mask, position_ids.

        ``None`` gives a batch-padding sample (sample 0 with an all-zero loss mask).
        """
        maker = self._maker
        if maker is None or maker.bound is not self._arrays:  # first call, or reloaded
            source, maker = self._sampler()
            maker.bind(source, self.document_index, self.sample_index, self.shuffle_index,
                       len(self), self._arrays)
        return maker.fetch(idx)

    def get_batch(self, indices: Sequence[Optional[int]],
                  out: Optional[Mapping[str, numpy.ndarray]] = None) -> Dict[str, numpy.ndarray]:
        """Fill ``[B, seq]`` arrays (tokens, labels, loss_mask, position_ids) for many samples.

        Same values as stacking ``self[i]`` (``None`` entries are padding samples); no
        attention mask or cu_seqlens. ``out`` (optional) supplies the arrays to fill.
        """
        from tokenloom.datasets._batch import get_batch

        return get_batch(self, indices, out)

    # -- pickling (DataLoader workers) -------------------------------------------------
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_source"] = state["_maker"] = None
        if state.get("_lazy") is not None:
            state["_arrays"] = None  # reopen the cached indices by mmap in the worker
        return state
