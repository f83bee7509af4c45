"""How a GPTDataset's document, sample and shuffle indices are sized and built.

Pure functions of (sequence lengths, exposed documents, sample count, config): the
epoch count, the separate-final-epoch rule (final epoch shuffled on its own when it
holds under 80% of an epoch's samples), the sample count that ``len()`` reports
without building anything, and the build itself (megatron-core 0.16.1 order of RNG
draws: document index, then shuffle index, from one ``RandomState(random_seed)``).
With ``shuffle_mode="bijection"`` the stored ``shuffle_index`` is the tiny parameter
table of :mod:`tokenloom.index.bijection` instead, and :func:`serve_bijection` puts its
:class:`~tokenloom.index.bijection.BijectionShuffle` in its place when it is served.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, cast

import numpy

from tokenloom.errors import CacheError, ConfigError, FormatError
from tokenloom.process_caches import SEEDED_GENERATORS, SEEDED_STATES

__all__ = [
    "EpochPlan",
    "LazyText",
    "build_indices",
    "check_sample_count",
    "count_samples",
    "plan_epochs",
    "plan_from_counts",
    "plan_of",
    "serve_bijection",
]

SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80


def count_samples(total_tokens: int, sequence_length: int, extra: int, drop_last: bool) -> int:
    """Samples in ``total_tokens`` exactly as helpers.cpp counts them (float32 ceil)."""
    numerator = total_tokens - extra
    if drop_last:
        return numerator // sequence_length
    return int(math.ceil(numpy.float32(numerator) / numpy.float32(sequence_length)))


@dataclass(frozen=True)
class EpochPlan:
    """Sizes that decide the indices of one GPTDataset split."""

    tokens_per_epoch: int
    num_epochs: int
    separate_final_epoch: bool
    num_samples_sans_final_epoch: int
    drop_last_partial_sequence: bool

    def total_samples(self, sequence_length: int, extra: int) -> int:
        """``len(dataset)``, computed without building the sample index."""
        return count_samples(
            self.num_epochs * self.tokens_per_epoch,
            sequence_length,
            extra,
            self.drop_last_partial_sequence,
        )


def _check_nonempty(indices: numpy.ndarray, tokens_per_epoch: int, where: str) -> None:
    if indices.size == 0 or tokens_per_epoch == 0:  # one token: megatron-core repeats it
        raise ConfigError(
            f"{where}: the split holds {indices.size} documents with {tokens_per_epoch} "
            "tokens, so it cannot give any sample (megatron-core would loop forever or "
            "abort); change the split weights so this split gets documents, or give it "
            "weight 0 so that it is not built"
        )


def _separate_final_epoch(
    num_samples: int, tokens: int, epochs: int, seq: int, extra: int, where: str
) -> tuple[bool, int]:
    sans_final = ((epochs - 1) * tokens - extra) // seq
    from_final = num_samples - sans_final
    per_epoch = (tokens - extra) // seq
    if from_final < 0 or from_final > per_epoch + 1:  # megatron asserts these
        raise ConfigError(
            f"{where}: inconsistent epoch plan ({from_final} samples from the final epoch, "
            f"{per_epoch} per epoch); this needs sequences longer than sequence_length"
        )
    return from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch), sans_final


def plan_epochs(
    sequence_lengths: numpy.ndarray,
    indices: numpy.ndarray,
    num_samples: Optional[int],
    sequence_length: int,
    extra: int,
    drop_last_partial_sequence: bool,
    where: str,
) -> EpochPlan:
    """Epoch count and final-epoch rule; raises ConfigError on an empty split."""
    from tokenloom.index import num_epochs_needed

    indices = numpy.asarray(indices)
    exposed = _exposed_lengths(sequence_lengths, indices)
    if indices.size and int(exposed.min()) < 0:
        at = int(indices[int(numpy.argmin(exposed))])
        raise FormatError(
            f"{where}: sequence {at} has negative length {int(exposed.min())} in "
            "the .idx; the index file is corrupt: rebuild the .bin/.idx pair"
        )
    tokens = int(exposed.sum(dtype=numpy.int64)) if indices.size else 0
    _check_nonempty(indices, tokens, where)
    epochs = (
        1 if num_samples is None else num_epochs_needed(tokens, num_samples, sequence_length, extra)
    )
    separate, sans_final = False, 0
    if epochs > 1 and num_samples is not None:  # one epoch without a sample count
        separate, sans_final = _separate_final_epoch(
            num_samples, tokens, epochs, sequence_length, extra, where
        )
    return EpochPlan(tokens, epochs, separate, sans_final, drop_last_partial_sequence)


def _exposed_lengths(sequence_lengths: numpy.ndarray, indices: numpy.ndarray) -> numpy.ndarray:
    """``sequence_lengths[indices]``; a slice (no gather) when ``indices`` is a short
    contiguous range, as a builder's split is (fancy indexing costs microseconds)."""
    if 0 < indices.shape[0] <= 256 and indices.ndim == 1:
        first, last = int(indices[0]), int(indices[-1])
        inside = 0 <= first and last < len(sequence_lengths)  # else the gather raises
        if (
            inside
            and last - first + 1 == indices.shape[0]
            and indices.tolist() == list(range(first, last + 1))
        ):
            return numpy.asarray(sequence_lengths[first : last + 1])
    return numpy.asarray(sequence_lengths[indices])


def plan_from_counts(
    tokens_per_epoch: int,
    num_epochs: int,
    num_samples: Optional[int],
    sequence_length: int,
    extra: int,
    drop_last_partial_sequence: bool,
    where: str,
) -> EpochPlan:
    """The plan from a token and epoch count that a subclass computed itself
    (``_get_num_tokens_per_epoch`` / ``_get_num_epochs``), with megatron-core's checks."""
    if tokens_per_epoch <= 0 or num_epochs < 1:
        raise ConfigError(
            f"{where}: {tokens_per_epoch} tokens per epoch and {num_epochs} epochs give no "
            "sample; the subclass's _get_num_tokens_per_epoch/_get_num_epochs must be >= 1"
        )
    separate, sans_final = False, 0
    if num_epochs > 1 and num_samples is not None:
        separate, sans_final = _separate_final_epoch(
            num_samples, tokens_per_epoch, num_epochs, sequence_length, extra, where
        )
    return EpochPlan(tokens_per_epoch, num_epochs, separate, sans_final, drop_last_partial_sequence)


def plan_of(dataset: Any) -> EpochPlan:
    """The epoch plan of a ``GPTDataset`` (its ``_plan``): from the subclass's size
    hooks when it overrides them, else from its documents' lengths."""
    if dataset.indices is None:
        raise CacheError(
            f"{dataset._where()}: indexed_indices is None (fast_cache_load): the "
            "sizes come from the index cache, which must exist"
        )
    where = cast(str, LazyText(dataset._where))  # the text is only needed for an error
    config = dataset.config
    extra, drop_last = int(config.add_extra_token_to_sequence), dataset.drop_last_partial_sequence
    if dataset._size_hooks:  # a subclass sizes the epochs itself
        tokens = int(dataset._get_num_tokens_per_epoch())
        epochs = int(dataset._get_num_epochs(tokens))
        return plan_from_counts(
            tokens, epochs, dataset.num_samples, config.sequence_length, extra, drop_last, where
        )
    return plan_epochs(
        dataset.dataset.sequence_lengths,
        dataset.indices,
        dataset.num_samples,
        config.sequence_length,
        extra,
        drop_last,
        where,
    )


def check_sample_count(arrays: Mapping[str, numpy.ndarray], where: str) -> None:
    """O(1) when a cache entry is loaded: every sample of ``sample_index`` is shuffled
    once, so ``len(dataset)`` is right before any fetch checks the values (a crafted
    entry with a short ``shuffle_index`` would otherwise serve fewer samples)."""
    rows, shuffle = arrays["sample_index"], arrays["shuffle_index"]
    count = shuffle.shape[0] if shuffle.ndim else -1
    if rows.ndim == 0 or max(rows.shape[0], 1) != count + 1:
        raise CacheError(
            f"{where}: shuffle_index holds {count} samples but sample_index has "
            f"shape {rows.shape}; delete the index cache (it is rebuilt)"
        )


def serve_bijection(arrays: dict[str, numpy.ndarray]) -> dict[str, numpy.ndarray]:
    """``arrays`` with the stored bijection table (``shuffle_index``) replaced by the
    :class:`~tokenloom.index.bijection.BijectionShuffle` it defines (the
    ``CachedIndices`` ``wrap`` of a ``shuffle_mode="bijection"`` dataset)."""
    from tokenloom.index.bijection import BijectionShuffle

    table = arrays["shuffle_index"]
    if table.ndim != 2 or table.dtype != numpy.uint64:
        raise CacheError(
            f"a bijection dataset's cached shuffle_index is its uint64 [2, n] table, got "
            f"{table.dtype} {table.shape}; delete the index cache (it is rebuilt)"
        )
    served: dict[str, Any] = dict(arrays)
    served["shuffle_index"] = BijectionShuffle(table)
    return served


class LazyText:
    """``str()`` gives ``where()``: text made only when an error message needs it."""

    __slots__ = ("where",)

    def __init__(self, where: Callable[[], str]) -> None:
        self.where = where

    def __str__(self) -> str:
        return self.where()

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


def build_indices(
    sequence_lengths: numpy.ndarray,
    indices: numpy.ndarray,
    plan: EpochPlan,
    sequence_length: int,
    extra: int,
    random_seed: int,
    shuffle_mode: str = "exact",
) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """``(document_index, sample_index, shuffle_index)`` as megatron-core builds them
    (``shuffle_mode="bijection"``: the bijection's table in place of ``shuffle_index``;
    the document and sample indices are the same)."""
    from tokenloom.datasets import _rng_memo
    from tokenloom.index import build_sample_index

    document_index, draws = _rng_memo.document_index(
        indices, plan.num_epochs, plan.separate_final_epoch, random_seed, _seeded_random_state
    )
    lengths = numpy.asarray(sequence_lengths)
    if document_index.shape[0] * 2 > lengths.shape[0]:
        lengths = numpy.array(lengths)  # dense access: read the mmap sequentially once
    sample_index = build_sample_index(
        lengths,
        document_index,
        sequence_length,
        plan.num_epochs,
        plan.tokens_per_epoch,
        plan.drop_last_partial_sequence,
        extra,
    )
    total = sample_index.shape[0] - 1
    first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else total
    if shuffle_mode == "bijection":
        from tokenloom.index.bijection import bijection_table

        return document_index, sample_index, bijection_table(first, total, random_seed, "")
    shuffle_index = _rng_memo.shuffle_index(draws, first, total, _seeded_random_state)
    return document_index, sample_index, shuffle_index


# -- the generator: restoring a saved MT19937 state (process_caches.SEEDED_STATES) is
# cheaper than seeding one; one reusable generator per thread (the builder may run
# prefixes in threads), kept in process_caches.SEEDED_GENERATORS


def _seeded_random_state(seed: int) -> numpy.random.RandomState:
    """A generator in exactly the state of ``numpy.random.RandomState(seed)``."""
    state = SEEDED_STATES.get(seed)
    if state is None:
        fresh = numpy.random.RandomState(seed)
        SEEDED_STATES.put(seed, fresh.get_state())
        return fresh
    thread = threading.get_ident()
    generator: Optional[numpy.random.RandomState] = SEEDED_GENERATORS.get(thread)
    if generator is None:
        generator = SEEDED_GENERATORS.put(thread, numpy.random.RandomState(0))
    generator.set_state(state)
    return generator
