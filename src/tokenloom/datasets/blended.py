"""``BlendedDataset``: several mid-level datasets mixed into one (megatron-core's).

Two index arrays say where each blended sample comes from:

* ``dataset_index`` (int16): which contributing dataset;
* ``dataset_sample_index`` (int64): which sample of that dataset.

With a ``size`` they follow the *largest sampling error* rule (sample ``t`` goes to
the dataset furthest behind its weight, see :func:`tokenloom.index.build_blending_indices`);
without one (``size=None``) every sample of every dataset is used exactly once
(:func:`tokenloom.index.build_exhaustive_blending_indices`, the weights then being the
dataset lengths).  Indices, samples and ``dataset_id`` equal megatron-core 0.16.1's.

Beyond megatron-core: every rule is checked with a :class:`~tokenloom.errors.ConfigError`
(megatron asserts), an oversampled contributing dataset is a ConfigError naming
``mid_level_dataset_surplus`` (megatron raises IndexError), and the indices are cached
through :mod:`tokenloom.cache` (atomic, validated, keyed by every input: the
contributing datasets' cache stems (hashes of their full identities), weights, size and
split).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.cache import CacheKey, IndexCache
from tokenloom.cache.indices import CachedIndices
from tokenloom.datasets._batch import allocate_batch, check_out, fill_rows
from tokenloom.datasets._ranges import AttributionPool, wants_ranges
from tokenloom.datasets.megatron_dataset import MegatronDescription
from tokenloom.datasets.schedule import schedule_of, to_arrays
from tokenloom.datasets.split import Split, normalize
from tokenloom.errors import ConfigError
from tokenloom.index import build_blending_indices, build_exhaustive_blending_indices
from tokenloom.index.schedule import build_scheduled_blending_indices
from tokenloom.index.validate import check_blended_indices, sample_position, sample_rows

# Not a torch.utils.data.Dataset subclass on purpose: a map-style dataset only
# needs __len__/__getitem__ for DataLoader, and the core (numpy only) must not import
# torch.

__all__ = ["BlendedDataset", "BLENDED_INDEX_NAMES"]

logger = logging.getLogger(__name__)

BLENDED_INDEX_NAMES = ("dataset_index", "dataset_sample_index")
_MAX_DATASETS = 32767  # dataset ids are int16


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, numpy.integer)) and not isinstance(value, (bool, numpy.bool_))


def _check_weights(
    weights: Sequence[Union[int, float]], size: Optional[int]
) -> list[Union[int, float]]:
    weights = list(weights)
    if weights and set(map(type, weights)) == {float}:  # the usual blend, checked at once
        floats = numpy.asarray(weights)
        if bool(numpy.all(floats > 0)) and bool(numpy.all(numpy.isfinite(floats))):
            if size is not None or bool(numpy.all(floats == numpy.trunc(floats))):
                return weights
    kinds = {_is_int(w) for w in weights}
    if len(kinds) > 1:
        raise ConfigError(f"weights {weights}: mix integers and floats; give all of one type")
    for w in weights:
        if (
            not (_is_int(w) or isinstance(w, (float, numpy.floating)))
            or not w > 0
            or not numpy.isfinite(w)
        ):
            raise ConfigError(
                f"weights {weights}: every weight must be a finite number > 0 (got {w!r}); a "
                f"zero weight usually means a contributing split has no samples, drop it"
            )
    if size is None and any(float(w) != int(w) for w in weights):
        raise ConfigError(
            f"weights {weights} with size=None: the exhaustive blend takes weights[i] "
            f"samples of dataset i, so the weights must be whole numbers; give a size"
        )
    return weights


def _check_datasets(datasets: Sequence[Any], weights: Sequence[Any]) -> Split:
    if not datasets:
        raise ConfigError("BlendedDataset needs at least one dataset")
    if len(datasets) != len(weights):
        raise ConfigError(f"{len(datasets)} datasets but {len(weights)} weights; give one each")
    if len(datasets) >= _MAX_DATASETS:
        raise ConfigError(f"{len(datasets)} datasets: a blend holds fewer than {_MAX_DATASETS}")
    kinds = {type(d).__name__ for d in datasets}
    if len(kinds) != 1:
        raise ConfigError(f"blended datasets must all be of one class, got {sorted(kinds)}")
    splits = {read_attribute(d, "index_split", None) for d in datasets}
    split = next(iter(splits))
    if len(splits) != 1 or not isinstance(split, Split):
        raise ConfigError(f"blended datasets must all belong to one split, got {splits}")
    return split


def _identity(dataset: Any) -> Any:
    """What shapes a contributing dataset: the stem of its own index cache (the hash of
    its full cache identity), else that identity itself (datasets without a cache)."""
    key = read_attribute(dataset, "cache_key", None)
    if key is not None:
        return key.stem
    return read_attribute(dataset, "cache_identifiers", None) or dataset.unique_identifiers


class BlendedDataset(MegatronDescription):
    """Blend ``datasets`` by ``weights`` (megatron-core's arguments, in order).

    Args:
        datasets: the mid-level datasets, all of one class and split.
        weights: one weight per dataset (> 0).  With a ``size`` they are normalised.
        size: number of blended samples, or None to take exactly ``weights[i]``
            (whole numbers) samples of dataset ``i``.
        config: the :class:`~tokenloom.datasets.BlendedMegatronDatasetConfig`.
        build_if_missing: build (and cache) the indices when the cache lacks them;
            when False a missing cache raises :class:`~tokenloom.errors.CacheError`.

    A subclass that overrides megatron-core's ``_build_indices`` hook gets it called in
    ``__init__``, as megatron-core does; the two arrays it returns are served as they are.
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[Union[int, float]],
        size: Optional[int],
        config: Any,
        *,
        build_if_missing: bool = True,
    ) -> None:
        if size is not None and (not _is_int(size) or size < 0):
            raise ConfigError(f"size={size!r}: must be None or an integer >= 0")
        self.split = _check_datasets(datasets, weights)
        weights = _check_weights(weights, size)
        if len(datasets) == 1:
            logger.warning("Building a BlendedDataset for a single MegatronDataset")
        self.datasets = list(datasets)
        self.weights = normalize(weights) if size is not None else [int(w) for w in weights]
        self.size = None if size is None else int(size)
        self.config = config
        self._ranges = wants_ranges(config)  # read once: get_batch asks on every call
        self._widths: Optional[list[int]] = None
        self.attribution_pool = AttributionPool()  # get_batch's reusable range arrays
        self.schedule = self._check_schedule()
        self.build_if_missing = bool(build_if_missing)
        self._describe()
        self.cache: Optional[IndexCache] = None
        self.cache_key: Optional[CacheKey] = None
        if type(self)._build_indices is not BlendedDataset._build_indices:
            given = dict(zip(BLENDED_INDEX_NAMES, map(numpy.asarray, self._build_indices())))
            self.cached_indices = CachedIndices(
                BLENDED_INDEX_NAMES, None, None, lambda: given, self._where
            )
            self.cached_indices.load_or_build()
        else:
            self.cached_indices = self._acquire_indices()

    def _build_indices(self) -> tuple[numpy.ndarray, numpy.ndarray]:
        """megatron-core's hook: ``(dataset_index, dataset_sample_index)``, from the index
        cache or built (and cached)."""
        arrays = self.__dict__.get("cached_indices") or self._acquire_indices()
        indices = arrays.arrays()
        return indices["dataset_index"], indices["dataset_sample_index"]

    def _check_schedule(self) -> Optional[list[Any]]:
        """The config's ``blend_schedule`` when this blend follows it (the train split)."""
        schedule = schedule_of(self.config, self.split.name)
        if schedule is None:
            return None
        if self.size is None or len(schedule[0][1]) != len(self.datasets):
            raise ConfigError(
                f"blend_schedule has {len(schedule[0][1])} weights per phase; the train "
                f"BlendedDataset blends {len(self.datasets)} datasets to size={self.size}: a "
                "schedule needs one weight per dataset and a size"
            )
        return [list(phase) for phase in schedule]

    # -- identity and cache ----------------------------------------------------------
    def _describe(self) -> None:
        ids: OrderedDict[str, Any] = OrderedDict()
        ids["class"] = type(self).__name__
        ids["datasets"] = [d.unique_identifiers for d in self.datasets]
        ids["split"] = self.split.name
        ids["weights"] = self.weights
        ids["size"] = self.size
        if self.schedule is not None:  # only then: other blends keep megatron-core's keys
            ids["blend_schedule"] = self.schedule
        self.unique_identifiers = ids

    @property
    def cache_identifiers(self) -> OrderedDict[str, Any]:
        """megatron-core's identifiers, with the datasets' full cache identities."""
        ids = OrderedDict(self.unique_identifiers)
        ids["datasets"] = [_identity(d) for d in self.datasets]
        ids["num_datasets"] = len(self.datasets)
        return ids

    def _acquire_indices(self) -> CachedIndices:
        directory = read_attribute(self.config, "path_to_cache", None)
        cache = key = None
        if not directory:
            logger.warning("path_to_cache is None: the BlendedDataset indices are not cached")
        else:
            cache = IndexCache(directory)
            key = CacheKey(type(self).__name__, self.split.name, self.cache_identifiers)
            self.cache, self.cache_key = cache, key
        verify = "size" if read_attribute(self.config, "fast_cache_load", False) else "checksum"
        indices = CachedIndices(
            BLENDED_INDEX_NAMES,
            cache,
            key,
            self._build,
            self._where,
            verify=verify,
            can_build=self.build_if_missing,
            validate=self._check_cached,
        )
        if (
            cache is not None
            and key is not None
            and read_attribute(self.config, "defer_npy_index_mmap", False)
            and cache.exists(key, BLENDED_INDEX_NAMES)
        ):
            indices.defer(verify="size")
        else:
            indices.load_or_build()
        return indices

    def _where(self) -> str:
        return f"the {self.split.name} {type(self).__name__} of {len(self.datasets)} datasets"

    def _check_cached(self, arrays: dict[str, numpy.ndarray], where: str) -> None:
        """Cached indices must name existing datasets and samples (CacheError if not)."""
        check_blended_indices(
            arrays["dataset_index"],
            arrays["dataset_sample_index"],
            [len(dataset) for dataset in self.datasets],
            len(self),
            where,
        )

    def _build(self) -> dict[str, numpy.ndarray]:
        logger.info("Build the %s %s indices", type(self).__name__, self.split.name)
        if self.schedule is not None and self.size is not None:
            arrays = build_scheduled_blending_indices(*to_arrays(self.schedule), self.size)
        elif self.size is not None:
            arrays = build_blending_indices(numpy.asarray(self.weights, numpy.float64), self.size)
        else:
            arrays = build_exhaustive_blending_indices(numpy.asarray(self.weights, numpy.int64))
        self._check_not_oversampled(arrays[0])
        return dict(zip(BLENDED_INDEX_NAMES, arrays))

    def _check_not_oversampled(self, dataset_index: numpy.ndarray) -> None:
        counts = numpy.bincount(dataset_index, minlength=len(self.datasets))
        for j, count in enumerate(counts.tolist()):
            available = len(self.datasets[j])
            if count > available:
                name = (
                    read_attribute(self.datasets[j], "dataset_path", None)
                    or type(self.datasets[j]).__name__
                )
                surplus = read_attribute(self.config, "mid_level_dataset_surplus", None)
                raise ConfigError(
                    f"the {self.split.name} blend oversamples its contributing datasets: it "
                    f"requests {count} samples from dataset {j} ({name}), which has only "
                    f"{available}. Increase the config attribute mid_level_dataset_surplus "
                    f"(now {surplus}), e.g. two- or ten-fold, so the mid-level datasets are "
                    f"built with enough spare samples"
                )

    # -- the two indices -------------------------------------------------------------
    def _index(self, name: str) -> numpy.ndarray:
        return self.cached_indices.arrays()[name]

    @property
    def dataset_index(self) -> numpy.ndarray:
        """int16: the contributing dataset of every blended sample."""
        return self._index("dataset_index")

    @property
    def dataset_sample_index(self) -> numpy.ndarray:
        """int64: the sample of that dataset."""
        return self._index("dataset_sample_index")

    @property
    def indices_loaded(self) -> bool:
        """Whether the indices are in memory/mmapped (False while deferred)."""
        return self.cached_indices.loaded

    def __len__(self) -> int:
        return int(self.size if self.size is not None else sum(self.weights))

    def __repr__(self) -> str:
        """What this blend is: split, samples, weights and each part's own repr (prefix,
        split, samples, epochs)."""
        weights = ", ".join(f"{weight:.4g}" for weight in self.weights)
        parts = ", ".join(repr(dataset) for dataset in self.datasets)
        return (
            f"{type(self).__name__}(split={self.split.name}, samples={len(self)}, "
            f"weights=[{weights}], datasets=[{parts}])"
        )

    # -- samples ---------------------------------------------------------------------
    def _position(self, idx: Any) -> int:
        if idx is None:  # int() would turn 1.7 or "1" into a sample silently
            raise TypeError("sample index must be an integer, got None")
        return sample_position(idx, len(self), "blended samples")

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """``{"dataset_id": ..., **datasets[dataset_id][dataset_sample_id]}``."""
        k = self._position(idx)
        dataset_id = self.dataset_index[k]
        return {"dataset_id": dataset_id, **self.datasets[dataset_id][self.dataset_sample_index[k]]}

    def _sources(self, rows: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
        """``(dataset ids int16, their sample positions int64)`` of blended positions
        ``rows`` (``-1``: padding, dataset 0 position ``-1``)."""
        padding = rows < 0
        if not len(self):  # only padding samples can be asked of an empty blend
            return numpy.zeros(len(rows), dtype=numpy.int16), rows.copy()
        safe = numpy.maximum(rows, 0)
        ids = numpy.asarray(self.dataset_index[safe], dtype=numpy.int16)
        positions = numpy.asarray(self.dataset_sample_index[safe], dtype=numpy.int64)
        if padding.any():
            ids[padding], positions[padding] = 0, -1
        return ids, positions

    def _range_widths(self) -> list[int]:
        """Each dataset's ``document_range_width()``, computed once: it depends on the
        content of its sample index only, which a reload (content-addressed) keeps."""
        widths = self._widths
        if widths is None:
            widths = self._widths = [d.document_range_width() for d in self.datasets]
        return widths

    def get_batch(
        self, indices: Sequence[Optional[int]], out: Optional[Mapping[str, numpy.ndarray]] = None
    ) -> dict[str, numpy.ndarray]:
        """``[B, seq]`` arrays for many blended samples, plus ``dataset_id`` ``[B]`` (int16).

        Same values as stacking ``self[i]``. ``None`` entries are padding samples
        (``datasets[0][None]``: zero loss mask, ``dataset_id`` 0); negative indices count
        from the end; others out of range raise
        :class:`~tokenloom.errors.SampleIndexError`. Each contributing dataset writes its
        rows straight into ``out`` (preallocated arrays, optional) in one pass
        (:func:`tokenloom.datasets._batch.fill_rows`).
        """
        indices = list(indices)
        rows = sample_rows(indices, len(self), "blended samples")
        shape = (len(indices), self.config.sequence_length)
        arrays = allocate_batch(*shape) if out is None else check_out(out, shape)
        ids, positions = self._sources(rows)
        groups = sorted(set(ids.tolist()))
        attribution = None
        if self._ranges:
            widths = self._widths or self._range_widths()
            width = (
                widths[groups[0]] if len(groups) == 1 else max([widths[j] for j in groups] or [1])
            )
            attribution = self.attribution_pool.take(len(ids), width, len(widths))
        if len(groups) == 1:  # one contributing dataset: no row map to build
            dest = numpy.arange(len(ids), dtype=numpy.int64)
            fill_rows(self.datasets[groups[0]], positions, dest, arrays, attribution, groups[0])
        for j in groups if len(groups) > 1 else ():
            dest = numpy.flatnonzero(ids == j)
            fill_rows(self.datasets[j], positions[dest], dest, arrays, attribution, j)
        if attribution is None:
            return {**arrays, "dataset_id": ids}
        ranges, counts, tokens = attribution
        return {
            **arrays,
            "dataset_id": ids,
            "document_ranges": ranges,
            "document_range_counts": counts,
            "tokens_per_source": tokens,
        }
