"""megatron-core's ``GPTDataset`` hooks, which Megatron-LM's subclasses override.

megatron-core's ``GPTDataset`` calls these methods of ``self``, and Megatron-LM extends
it by overriding them (``GPTFIMDataset`` overrides
``_query_document_sample_shuffle_indices``; others rebuild the indices or count epochs
their own way). :class:`MegatronHooks` gives ``GPTDataset`` each hook with
megatron-core's arguments and results, and :meth:`MegatronHooks.overrides` tells
whether a subclass replaced one: then ``GPTDataset`` calls it exactly where
megatron-core would, and its fast paths (the numba sample and batch kernels, the
cached index build) step aside.

===========================================  ========================================
hook (megatron-core's signature)             called by tokenloom's ``GPTDataset`` when
                                             overridden
===========================================  ========================================
``_query_document_sample_shuffle_indices``   ``dataset[idx]`` (``0`` for ``None``),
(idx) -> (tokens int64, document ids int64)  and every row of ``get_batch``
``_build_document_sample_shuffle_indices``   ``__init__``, once; the arrays it returns
() -> (document, sample, shuffle index)      are served as they are (not cached)
``_get_num_tokens_per_epoch`` () -> int       sizing the indices and ``len()``
``_get_num_epochs`` (num_tokens) -> int       sizing the indices and ``len()``
===========================================  ========================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy

from tokenloom.cache.indices import CachedIndices
from tokenloom.errors import ConfigError
from tokenloom.index.validate import sample_position

__all__ = ["INDEX_NAMES", "SAMPLE_HOOKS", "SIZE_HOOKS", "IndexArrays", "MegatronHooks"]

INDEX_NAMES = ("document_index", "sample_index", "shuffle_index")

SAMPLE_HOOKS = ("__getitem__", "_query_document_sample_shuffle_indices")
"""Overriding any of these makes every sample (and batch row) come from ``dataset[i]``."""

SIZE_HOOKS = ("_get_num_tokens_per_epoch", "_get_num_epochs")
"""Overriding either makes the epoch plan come from them."""


class MegatronHooks:
    """Mixin of ``GPTDataset``: megatron-core's hook methods, readable versions.

    The host provides ``cached_indices``, ``sampler()``, ``dataset``, ``indices``,
    ``num_samples``, ``config`` and ``_pad_token_id``.
    """

    @classmethod
    def overrides(cls, name: str) -> bool:
        """Whether ``cls`` replaces the hook ``name`` of tokenloom's own class."""
        own = _owner_of_hooks(cls)
        return getattr(cls, name) is not getattr(own, name)

    @classmethod
    def samples_by_hook(cls) -> bool:
        """Whether samples must come from ``dataset[i]`` (a sample hook is overridden)."""
        return any(cls.overrides(name) for name in SAMPLE_HOOKS)

    # -- the hooks, as megatron-core 0.16.1 defines them -------------------------------
    def _query_document_sample_shuffle_indices(
        self, idx: int
    ) -> tuple[numpy.ndarray, numpy.ndarray]:
        """``(tokens, document_ids)`` of sample ``idx``: the ``sequence_length +
        add_extra_token_to_sequence`` tokens (int64, padded with the pad id) and the ids
        of the documents they come from (int64), in megatron-core's order."""
        host: Any = self
        arrays = host.cached_indices.arrays()
        source, maker = host.sampler()
        document_index, sample_index = arrays["document_index"], arrays["sample_index"]
        row = int(arrays["shuffle_index"][sample_position(idx, len(host))])
        text = numpy.empty(maker.seq + maker.extra, dtype=numpy.int64)
        source.gather(document_index, sample_index, row, maker.extra, maker.pad, text)
        begin, end = int(sample_index[row][0]), int(sample_index[row + 1][0])
        return text, numpy.asarray(document_index[begin : end + 1], dtype=numpy.int64)

    def _build_document_sample_shuffle_indices(
        self,
    ) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
        """``(document_index, sample_index, shuffle_index)``: loaded from the index cache,
        or built and cached (tokenloom's cache, keyed on every input that shapes them)."""
        host: Any = self
        arrays = host.cached_indices_from_cache().arrays()
        return arrays["document_index"], arrays["sample_index"], arrays["shuffle_index"]

    def _get_num_tokens_per_epoch(self) -> int:
        """Tokens in one epoch of this split's documents."""
        host: Any = self
        lengths = host.dataset.sequence_lengths[host.indices]
        return int(numpy.sum(lengths, dtype=numpy.int64))

    def _get_num_epochs(self, num_tokens_per_epoch: int) -> int:
        """Epochs needed for ``num_samples`` samples (1 when it is None)."""
        from tokenloom.index import num_epochs_needed

        host: Any = self
        if host.num_samples is None:
            return 1
        return int(
            num_epochs_needed(
                int(num_tokens_per_epoch),
                host.num_samples,
                host.config.sequence_length,
                int(host.config.add_extra_token_to_sequence),
            )
        )

    def sample_from_hook(self, idx: Optional[int]) -> dict[str, numpy.ndarray]:
        """``dataset[idx]`` from an overridden ``_query_document_sample_shuffle_indices``:
        megatron-core's ``__getitem__`` around it (the hook is called with ``0`` for a
        padding sample, as megatron-core does)."""
        host: Any = self
        # megatron-core 0.16.1 returns (tokens, document ids); Megatron-LM main adds a
        # third item (the sample's part lengths): the tokens come first in both
        found = self._query_document_sample_shuffle_indices(0 if idx is None else idx)
        _, maker = host.sampler()
        lengths = found[2] if len(found) > 2 else None
        sample: dict[str, numpy.ndarray] = maker.make_from_text(
            numpy.asarray(found[0], dtype=numpy.int64), idx is None, lengths
        )
        return sample


class IndexArrays:
    """Mixin of ``GPTDataset``: the three index arrays, which megatron-core keeps as plain
    attributes that subclasses may assign; an assignment serves the new arrays as given
    (not cached). The host provides ``cached_indices`` and ``_where``."""

    cached_indices: CachedIndices
    _length: Optional[int]

    def _index(self, name: str) -> numpy.ndarray:
        return self.cached_indices.arrays()[name]

    def _where(self) -> str:
        """Names the dataset in errors (the host's own)."""
        return type(self).__name__

    def _given_indices(self, arrays: Sequence[numpy.ndarray]) -> CachedIndices:
        """Index arrays a subclass built itself, served as they are (not cached)."""
        given = dict(zip(INDEX_NAMES, (numpy.asarray(a) for a in arrays)))
        if len(given) != len(INDEX_NAMES):
            raise ConfigError(
                f"{type(self).__name__}._build_document_sample_shuffle_indices must return "
                "(document_index, sample_index, shuffle_index)"
            )
        held = CachedIndices(INDEX_NAMES, None, None, lambda: given, self._where)
        held.load_or_build()
        self._length = None
        return held

    def _set_index(self, name: str, value: numpy.ndarray) -> None:
        """A subclass assigns an index array (megatron-core's attributes are plain)."""
        arrays = dict(self.cached_indices.arrays())
        arrays[name] = value
        self.cached_indices = self._given_indices([arrays[n] for n in INDEX_NAMES])

    @property
    def document_index(self) -> numpy.ndarray:
        """int32 document ids, epoch after epoch, shuffled."""
        return self._index("document_index")

    @document_index.setter
    def document_index(self, value: numpy.ndarray) -> None:
        self._set_index("document_index", value)

    @property
    def sample_index(self) -> numpy.ndarray:
        """``[len + 1, 2]``: (position in document_index, offset) where samples start."""
        return self._index("sample_index")

    @sample_index.setter
    def sample_index(self, value: numpy.ndarray) -> None:
        self._set_index("sample_index", value)

    @property
    def shuffle_index(self) -> numpy.ndarray:
        """The order in which samples are served."""
        return self._index("shuffle_index")

    @shuffle_index.setter
    def shuffle_index(self, value: numpy.ndarray) -> None:
        self._set_index("shuffle_index", value)


def _owner_of_hooks(cls: type) -> type:
    """The first class in ``cls``'s MRO that inherits the hooks straight from
    :class:`MegatronHooks` (tokenloom's ``GPTDataset``)."""
    for klass in cls.__mro__:
        if MegatronHooks in klass.__bases__:
            return klass
    return MegatronHooks
