"""``BlendedMegatronDatasetBuilder``: every dataset split of a config, as megatron-core builds it.

For each split the builder returns a dataset or None, following megatron-core
0.16.1 case by case (so the same config gives the same samples):

* no blend (``config.mock``): the mock datasets (``MockGPTDataset``, also when
  ``GPTDataset`` is asked for, which has no data to read);
* ``blend`` with one prefix and no weights: one mid-level dataset per split;
* ``blend`` with weights (sizes required): mid-level datasets sized
  ``ceil(ceil(size * weight) * (1 + mid_level_dataset_surplus))``, blended to
  ``sum(ceil(size * weight))`` samples by the largest-sampling-error rule;
* ``blend`` without weights: one epoch of each mid-level dataset, blended by their
  lengths to ``min(size, total)`` samples, or exhaustively when the size is None;
* ``blend_per_split``: the same per split, from that split's own blend (one prefix:
  a plain mid-level dataset; ``multiple_validation_sets``: a list of validation datasets).

The prefixes of a blend are built in ``num_dataset_builder_threads`` threads.  Under
``torch.distributed`` with ``build_on_all_ranks`` and a cache folder every rank sees,
each rank builds a share of a blend's prefixes and then loads the others'
(:mod:`tokenloom.builder.cold_build`).  Otherwise rank 0 builds first and the other
ranks then load from the cache, through :func:`tokenloom.distributed.build_on_rank0_then_load` (failures on
rank 0 raise on every rank, node-local caches are built once per node; with
``fast_cache_load`` every rank loads on its own).  Ranks where ``is_built_on_rank()``
is False get None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.builder.agreement import check_ranks_agree, sample_fingerprint
from tokenloom.builder.cold_build import build_blend_in_shares, spreads
from tokenloom.builder.manifest import cache_manifest, cache_visible, cyclic_gc_paused
from tokenloom.builder.remote_indices import prefetch_remote_indices
from tokenloom.builder.sizes import (
    apply_schedule,
    blend_sizes,
    check_built_length,
    check_sizes,
    check_sizes_against_weights,
    get_size_per_split_per_dataset,
    split_indices,
)
from tokenloom.builder.startup import Startup, accepts_start_keywords
from tokenloom.cache import EntryPacker, IndexCache
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.datasets.gpt import GPTDataset
from tokenloom.datasets.mock import MockGPTDataset
from tokenloom.datasets.repetition import check_repetitions
from tokenloom.datasets.split import SPLITS, Split
from tokenloom.distributed import Communicator, build_on_rank0_then_load, get_communicator
from tokenloom.errors import ConfigError

__all__ = ["BlendedMegatronDatasetBuilder", "get_size_per_split_per_dataset"]

logger = logging.getLogger(__name__)


def _mock_class_if_needed(cls: type, config: Any, substitutes: Sequence[tuple[type, type]]) -> type:
    """``GPTDataset`` on a config without data means mock data: use ``MockGPTDataset``."""
    if read_attribute(config, "mock", False):
        for real, mock in substitutes:
            if cls is real:
                logger.info("no blend given: building %s splits (mock data)", mock.__name__)
                return mock
    return cls


class BlendedMegatronDatasetBuilder:
    """Build all splits (megatron-core's arguments, in order).

    Args:
        cls: the mid-level dataset class (``GPTDataset``, ``MockGPTDataset``, ...).
        sizes: the minimum number of samples per split (train, valid, test), or None.
        is_built_on_rank: returns True where this rank needs the datasets (it must
            be True on global rank 0); other ranks get None.
        config: the :class:`~tokenloom.datasets.BlendedMegatronDatasetConfig`.
        comm: tokenloom extension: who this process is (rank, world size, node);
            defaults to ``torch.distributed`` and ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``.

    Subclasses (the compat layer's) choose the classes the builder makes itself:
    """

    blended_dataset_class: type = BlendedDataset
    """The top-level dataset of a blend."""

    mock_substitutes: tuple[tuple[type, type], ...] = ((GPTDataset, MockGPTDataset),)
    """``(asked, built)``: the class built instead of ``asked`` on a config without data."""

    def __init__(
        self,
        cls: type,
        sizes: Sequence[Optional[int]],
        is_built_on_rank: Callable[[], bool],
        config: Any,
        *,
        comm: Optional[Communicator] = None,
    ) -> None:
        self.cls: type[Any] = _mock_class_if_needed(cls, config, self.mock_substitutes)
        self.sizes = check_sizes(sizes)
        self.is_built_on_rank = is_built_on_rank
        self.config = config
        self.comm = comm
        self._start_keywords = accepts_start_keywords(self.cls)
        self._spreads: Optional[bool] = None  # whether blends are built in shares (cold_build)
        logger.info(
            "Building %s splits with sizes=%s and config=%s", cls.__name__, self.sizes, config
        )
        if not config.mock:
            check_sizes_against_weights(config, self.sizes)

    # -- public ------------------------------------------------------------------------
    def build(self) -> list[Optional[Any]]:
        """One dataset (or None, or a list for multiple validation sets) per split.

        Must be called on every rank when torch.distributed is initialised.
        """
        if not read_attribute(self.config, "fast_cache_load", False):  # then no rank exchanges
            check_ranks_agree(sample_fingerprint(self.config, self.sizes, self.cls), self.comm)
        prefetch_remote_indices(self.config, self.comm)  # s3:// .idx: once per node
        with cyclic_gc_paused():
            datasets = self._build_blended_dataset_splits()
        for split, dataset in zip(Split, datasets):
            for item in dataset if isinstance(dataset, list) else [dataset]:
                check_built_length(item, self.config.path_to_cache)
                check_repetitions(item, self.config, split.name)
        return datasets

    # -- the three configurations ------------------------------------------------------
    def _build_blended_dataset_splits(self) -> list[Optional[Any]]:
        if self.config.mock:
            return self._build_megatron_dataset_splits(None, self.config.split_matrix, self.sizes)
        if self.config.blend:
            return self._build_from_blend()
        return [self._build_split_from_own_blend(split) for split in Split]

    def _build_from_blend(self) -> list[Optional[Any]]:
        prefixes, weights = self.config.blend
        split = self.config.split_matrix
        if len(prefixes) == 1 and weights is None:
            return self._build_megatron_dataset_splits(prefixes[0], split, self.sizes)
        surplus = self.config.mid_level_dataset_surplus
        weights, target, buffer = apply_schedule(
            self.config,
            self.sizes,
            surplus,
            blend_sizes(weights, self.sizes, surplus, len(prefixes)),
        )
        mid = self._build_megatron_datasets_parallel(prefixes, split, buffer)
        return [
            None
            if split[i] is None
            else self._build_top_level(mid[i], weights, target, i, self.sizes[i])
            for i in range(len(Split))
        ]

    def _build_split_from_own_blend(self, split: Split) -> Optional[Any]:
        i = split.value
        blend = self.config.blend_per_split[i]
        if blend is None:
            return None
        prefixes, weights = blend
        split_spoof: list[Optional[tuple[float, float]]] = [None] * len(Split)
        split_spoof[i] = (0.0, 1.0)
        sizes_spoof: list[Optional[int]] = [0] * len(Split)
        sizes_spoof[i] = self.sizes[i]
        if len(prefixes) == 1:
            return self._build_megatron_dataset_splits(prefixes[0], split_spoof, sizes_spoof)[i]
        if self.config.multiple_validation_sets and split == Split.valid:
            return self._build_validation_sets(prefixes, split_spoof, sizes_spoof)
        surplus = self.config.mid_level_dataset_surplus
        weights, target, buffer = blend_sizes(weights, sizes_spoof, surplus, len(prefixes))
        mid = self._build_megatron_datasets_parallel(prefixes, split_spoof, buffer)[i]
        return self._build_top_level(mid, weights, target, i, self.sizes[i])

    def _build_validation_sets(
        self,
        prefixes: list[str],
        split_spoof: list[Optional[tuple[float, float]]],
        sizes_spoof: list[Optional[int]],
    ) -> list[Optional[Any]]:
        i = Split.valid.value
        if self.config.full_validation and sizes_spoof[i] is not None:
            raise ConfigError(
                f"full_validation builds one full epoch of every validation set, so the valid "
                f"size must be None (got {sizes_spoof[i]})"
            )
        return [
            self._build_megatron_dataset_splits(prefix, split_spoof, sizes_spoof)[i]
            for prefix in prefixes
        ]

    def _build_top_level(
        self,
        datasets: list[Optional[Any]],
        weights: Optional[list[float]],
        target: Optional[list[list[int]]],
        i: int,
        size: Optional[int],
    ) -> Optional[BlendedDataset]:
        size_i: Optional[int]
        blend_weights: list[Union[int, float]]
        if weights is not None:
            if size is None or target is None:
                raise ConfigError("blend weights require a size for every split they feed")
            size_i = sum(per_dataset[i] for per_dataset in target)
            blend_weights = list(weights)
        else:
            try:
                blend_weights = [len(dataset) for dataset in datasets]  # type: ignore[arg-type]
            except TypeError:  # datasets not built on this rank
                blend_weights = [0 for _ in datasets]
            size_i = None if size is None else min(size, int(sum(blend_weights)))
        built: Optional[BlendedDataset] = self._on_ranks(
            lambda: self.blended_dataset_class(datasets, blend_weights, size_i, self.config),
            f"the {Split(i).name} BlendedDataset",
        )
        return built

    # -- mid-level datasets ------------------------------------------------------------
    def _build_megatron_datasets_parallel(
        self,
        prefixes: list[str],
        split: list[Optional[tuple[float, float]]],
        sizes_per_dataset: list[list[Optional[int]]],
    ) -> list[list[Optional[Any]]]:
        """For each split, the mid-level dataset of every prefix (built in threads).

        With the start-up shortcut (:mod:`tokenloom.builder.startup`) the prefixes it
        vouches for are not opened: their datasets get a ``LazyIndexedDataset``. When it
        vouches for all of them nothing is left to wait for, so no threads are started.
        Small index caches go into one pack file (:class:`~tokenloom.cache.EntryPacker`).
        With ``build_on_all_ranks`` on a shared cache the ranks build it in shares.
        """
        if self._in_shares():
            return build_blend_in_shares(self, prefixes, split, sizes_per_dataset)

        def construct() -> list[list[Optional[Any]]]:
            directory = read_attribute(self.config, "path_to_cache", None)
            if not directory or not self._start_keywords:
                return build(None)
            with EntryPacker(directory) as packer:
                return build(IndexCache(directory, packer=packer))

        def build(cache: Optional[IndexCache]) -> list[list[Optional[Any]]]:
            startup = Startup.for_blend(self.cls, self.config, prefixes)
            lows = [None if startup is None else startup.known(p) for p in prefixes]
            firsts: dict[Split, Any] = {}  # per split, the dataset its siblings copy
            jobs = [
                (self._construct_splits, prefix, split, sizes, low, startup, cache, firsts)
                for prefix, sizes, low in zip(prefixes, sizes_per_dataset, lows)
            ]
            if startup is not None and all(low is not None for low in lows):
                results = [job[0](*job[1:]) for job in jobs]
            else:
                results = self._in_threads(jobs)
            per_split = [list(column) for column in zip(*results)]
            if startup is not None:
                startup.finish(d for column in per_split for d in column)
            return per_split

        built = self._on_ranks(
            construct, f"the {self.cls.__name__} datasets of {len(prefixes)} prefixes"
        )
        return built if built is not None else [[None] * len(prefixes) for _ in Split]

    def _build_megatron_dataset_splits(
        self,
        dataset_path: Optional[str],
        split: list[Optional[tuple[float, float]]],
        sizes: list[Optional[int]],
        synchronize_ranks: bool = True,
    ) -> list[Optional[Any]]:
        """Every split's mid-level dataset of one low-level dataset (rank 0 first, unless
        ``synchronize_ranks`` is False: then every rank builds at once)."""
        if not synchronize_ranks:
            if not self.is_built_on_rank():
                return [None] * len(Split)
            return self._construct_splits(dataset_path, split, sizes)
        built = self._on_ranks(
            lambda: self._construct_splits(dataset_path, split, sizes),
            f"the {self.cls.__name__} splits of {dataset_path or 'mock data'}",
        )
        return built if built is not None else [None] * len(Split)

    @staticmethod
    def build_generic_dataset(
        cls: Union[type, Callable[..., Any]],
        is_built_on_rank: Callable[[], bool],
        synchronize_ranks: bool,
        *args: Any,
    ) -> Optional[Any]:
        """megatron-core's: ``cls(*args)`` built on rank 0 first and then on the other ranks
        where ``is_built_on_rank()`` (None elsewhere); every rank at once without
        ``synchronize_ranks``. A failure on rank 0 is raised on every rank."""
        return build_on_rank0_then_load(
            lambda: cls(*args),
            is_built_on_rank=is_built_on_rank,
            synchronize=synchronize_ranks,
            what=str(read_attribute(cls, "__name__", "a dataset")),
        )

    def _in_threads(self, jobs: list[tuple[Any, ...]]) -> list[Any]:
        """``[job[0](*job[1:]) for job in jobs]`` in ``num_dataset_builder_threads`` threads."""
        workers = max(1, min(int(self.config.num_dataset_builder_threads), len(jobs)))
        if workers == 1:  # no thread to hand each job to and wait for
            return [job[0](*job[1:]) for job in jobs]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(*job) for job in jobs]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _construct_splits(
        self,
        dataset_path: Optional[str],
        split: list[Optional[tuple[float, float]]],
        sizes: list[Optional[int]],
        low_level: Any = None,
        startup: Optional[Startup] = None,
        cache: Optional[IndexCache] = None,
        firsts: Optional[dict[Split, Any]] = None,
    ) -> list[Optional[Any]]:  # firsts: each split's first GPTDataset, copied by the others
        if low_level is None and startup is not None and dataset_path is not None:
            low_level = startup.open(self.cls, dataset_path)
        elif low_level is None:
            low_level = self.cls.build_low_level_dataset(dataset_path, self.config)
        keywords = self._dataset_keywords(low_level, startup, cache)
        num_elements = self.cls.numel_low_level_dataset(low_level)
        fast = bool(read_attribute(self.config, "fast_cache_load", False))
        datasets: list[Optional[Any]] = []
        for i, member in enumerate(SPLITS):
            if (bounds := split[i]) is None:
                datasets.append(None)
                continue
            indices, in_range = split_indices(bounds, num_elements, fast)
            low = (low_level, dataset_path, indices, sizes[i])
            if firsts and (first := firsts.get(member)) is not None:
                dataset = first.sibling(*low, indices_in_range=in_range, **keywords)
            else:
                dataset = self.cls(*low, member, self.config, **keywords)
                if firsts is not None and isinstance(dataset, GPTDataset):
                    firsts.setdefault(member, dataset)
            datasets.append(dataset)
        if startup is not None:
            startup.release(low_level)
        return datasets

    def _dataset_keywords(
        self, low_level: Any, startup: Optional[Startup], cache: Optional[IndexCache]
    ) -> dict[str, Any]:
        """The ``index_cache`` and ``warm_start`` keywords for a class that takes them."""
        if not self._start_keywords:
            return {}
        keywords: dict[str, Any] = {}
        if cache is not None:
            keywords["index_cache"] = cache
        warm = None if startup is None else startup.warm_start(low_level)
        if warm is not None:
            keywords["warm_start"] = warm
        return keywords

    # -- ranks -------------------------------------------------------------------------
    def _in_shares(self) -> bool:
        """Whether blends are built in shares by all ranks (decided once: a collective)."""
        if self._spreads is None:
            comm = self.comm or get_communicator()
            self._spreads = spreads(self.config, comm, self._start_keywords)
        return self._spreads

    def _on_ranks(self, construct: Callable[[], Any], what: str) -> Any:
        return build_on_rank0_then_load(
            construct,
            is_built_on_rank=self.is_built_on_rank,
            synchronize=not read_attribute(self.config, "fast_cache_load", False),
            manifest=self._cache_manifest,
            is_ready=self._cache_visible,
            comm=self.comm,
            what=what,
        )

    def _cache_manifest(self, built: Any) -> dict[str, Any]:
        """The description files (commit markers) of every cache ``built`` used."""
        return cache_manifest(built, self.config.path_to_cache)

    def _cache_visible(self, manifest: Optional[dict[str, Any]]) -> bool:
        """Whether this rank sees every cache file rank 0 reported (in its own cache dir)."""
        return cache_visible(manifest, self.config.path_to_cache)
