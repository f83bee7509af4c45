"""``GPTDataset.sibling``: the dataset of another prefix, for the same split and config.

A blend of thousands of prefixes constructs thousands of ``GPTDataset``\\ s that differ
only in their low-level dataset, prefix, document ids and sample count: everything
else ``__init__`` derives (the pad id, the hook flags, the config part of the
identifiers, the ``.bin`` pool's bound) comes from the config and the class alone. The
builder makes the first dataset of each split in full and the others with
:meth:`SiblingMixin.sibling`, which copies those values and sets the per-prefix ones
exactly as ``__init__`` does (the same checks, the same cache key and index holder).

It applies only to a plain ``GPTDataset`` whose attributes are exactly
:data:`INIT_ATTRIBUTES` (a test compares a sibling's attributes with a full
construction's); anything else (a subclass, an attribute this list does not know) is
constructed in full.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import numpy

from tokenloom.datasets._gpt_low_level import checked_indices
from tokenloom.datasets._ranges import AttributionPool
from tokenloom.datasets.megatron_dataset import checked_num_samples

__all__ = ["INIT_ATTRIBUTES", "PER_PREFIX", "SiblingMixin"]

PER_PREFIX = frozenset(
    {
        "dataset",
        "dataset_path",
        "indices",
        "num_samples",
        "unique_identifiers",
        "_source",
        "_maker",
        "_batch_inputs",
        "_length",
        "cache",
        "cache_key",
        "cached_indices",
        "_from_cache",
        "_pending_cache",
        "attribution_pool",
    }
)
"""What ``__init__`` sets from the prefix (set again for each sibling)."""
SHARED = frozenset(
    {
        "index_split",
        "config",
        "_pad_token_id",
        "build_if_missing",
        "masks_and_position_ids_are_cacheable",
        "_sample_hook",
        "_ranges",
        "_plain",
        "_size_hooks",
    }
)
"""What ``__init__`` derives from the class, split and config alone (copied)."""
INIT_ATTRIBUTES = PER_PREFIX | SHARED
"""Every attribute a plain ``GPTDataset``'s ``__init__`` sets."""


class SiblingMixin:
    """Mixin of ``GPTDataset``. The host provides its ``__init__`` and
    ``cached_indices_from_cache()``, and names itself the plain class by defining
    ``copies_siblings = True`` in its own body (a subclass, which does not define it
    again, is constructed in full)."""

    def sibling(
        self,
        indexed_dataset: Any,
        dataset_path: Optional[str],
        indexed_indices: Optional[numpy.ndarray],
        num_samples: Optional[int],
        *,
        index_cache: Any = None,
        warm_start: Any = None,
        indices_in_range: bool = False,
    ) -> Any:
        """``type(self)(indexed_dataset, dataset_path, indexed_indices, num_samples,
        self.index_split, self.config, build_if_missing=self.build_if_missing,
        index_cache=index_cache, warm_start=warm_start)``, without deriving again what
        only the class and config shape (see the module docstring); with
        ``indices_in_range`` the caller vouches for the ids' range (the builder's
        ``arange`` of a split, checked by its ends): their values are not scanned."""
        host: Any = self
        cls, state = type(self), self.__dict__
        plain = cls.__dict__.get("copies_siblings") is True
        low = (indexed_dataset, dataset_path, indexed_indices, num_samples)
        if not plain or state.keys() != INIT_ATTRIBUTES or indexed_indices is None:
            return _constructed(host, low, index_cache, warm_start)
        indices = indexed_indices  # checked as __init__ does, in order
        if not (indices_in_range and type(indices) is numpy.ndarray and indices.ndim == 1):
            indices = checked_indices(indexed_dataset, indices)
        count = checked_num_samples(num_samples)
        new: Any = object.__new__(cls)
        fresh = new.__dict__
        fresh.update({name: state[name] for name in SHARED})
        identifiers = OrderedDict(host.unique_identifiers)
        identifiers["dataset_path"], identifiers["num_samples"] = dataset_path, count
        fresh.update(
            dataset=indexed_dataset,
            dataset_path=dataset_path,
            indices=indices,
            num_samples=count,
            unique_identifiers=identifiers,
            _source=None,
            _maker=None,
            _batch_inputs=None,
            _length=None,
            cache=None,
            cache_key=None,
            _pending_cache=(index_cache, warm_start),
            attribution_pool=None if state["attribution_pool"] is None else AttributionPool(),
        )
        new.cached_indices = new.cached_indices_from_cache()
        new._pending_cache = (None, None)
        return new


def _constructed(host: Any, low: tuple[Any, ...], index_cache: Any, warm_start: Any) -> Any:
    """``host.sibling(*low, ...)`` constructed in full."""
    split, config, build = host.index_split, host.config, host.build_if_missing
    keywords = dict(index_cache=index_cache, warm_start=warm_start)
    return type(host)(*low, split, config, build_if_missing=build, **keywords)
