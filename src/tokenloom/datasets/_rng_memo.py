"""Reuse the random draws of small GPT index builds (cold starts over many prefixes).

megatron-core draws a GPTDataset's permutations from a fresh
``numpy.random.RandomState(random_seed)``: first the document index (one or two
shuffles), then the shuffle index (one or two). A shuffle's swaps depend only on the
generator's state and the array's length, so ``shuffle(x) == x[shuffle(arange(n))]``,
and every prefix of a blend draws from the same seed. Prefixes with the same document
count, epochs and sample counts therefore get the same permutations; seeding a
generator costs more than the rest of a small build.

:func:`document_index` and :func:`shuffle_index` return exactly what
:func:`tokenloom.index.build_document_index` and :func:`build_shuffle_index` return
from that generator (property-tested in ``tests/datasets/test_rng_memo.py``), from a
bounded memo of the permutations of small sizes and the generator state after the
document shuffles; a miss draws them as megatron-core does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy

from tokenloom.process_caches import DOCUMENT_DRAWS, SHUFFLE_DRAWS

__all__ = ["MAX_MEMO_ITEMS", "Draws", "document_index", "shuffle_index"]

MAX_MEMO_ITEMS = 1 << 16
"""Permutations up to this length are memoised (in
:data:`tokenloom.process_caches.DOCUMENT_DRAWS` and ``SHUFFLE_DRAWS``)."""


class Draws:
    """Where the document shuffles left the generator: a live generator (large builds)
    or, for memoised ones, the memo key and the generator state."""

    __slots__ = ("generator", "key", "state", "seed")

    def __init__(
        self,
        generator: Optional[numpy.random.RandomState] = None,
        key: Optional[tuple[Any, ...]] = None,
        state: Any = None,
        seed: int = 0,
    ) -> None:
        self.generator, self.key, self.state, self.seed = generator, key, state, seed


def document_index(
    indices: numpy.ndarray,
    num_epochs: int,
    separate_final_epoch: bool,
    random_seed: int,
    seeded: Callable[[int], numpy.random.RandomState],
) -> tuple[numpy.ndarray, Draws]:
    """``build_document_index(indices, num_epochs, RandomState(random_seed),
    separate_final_epoch)`` and the :class:`Draws` for :func:`shuffle_index`;
    ``seeded(seed)`` gives a generator in the state of ``RandomState(seed)``."""
    from tokenloom.index import build_document_index

    count = int(indices.shape[0])
    separate = bool(separate_final_epoch and num_epochs > 1)
    if indices.dtype != numpy.int32 or count * num_epochs > MAX_MEMO_ITEMS:
        generator = seeded(random_seed)
        return build_document_index(indices, num_epochs, generator, separate), Draws(generator)
    key = (int(random_seed), count, int(num_epochs), separate)
    known = DOCUMENT_DRAWS.get(key)
    if known is None:
        generator = seeded(random_seed)
        positions = build_document_index(
            numpy.arange(count, dtype=numpy.int32), num_epochs, generator, separate
        )
        known = (positions, generator.get_state(legacy=False))
        DOCUMENT_DRAWS.put(key, known)
    return indices[known[0]], Draws(key=key, state=known[1], seed=int(random_seed))


def shuffle_index(
    draws: Draws,
    num_samples: int,
    total_size: int,
    seeded: Callable[[int], numpy.random.RandomState],
) -> numpy.ndarray:
    """``build_shuffle_index(num_samples, total_size, generator)`` with the generator
    where the document shuffles of ``draws`` left it."""
    from tokenloom.index import build_shuffle_index

    if draws.generator is not None:
        return build_shuffle_index(num_samples, total_size, draws.generator)
    full = tuple(draws.key or ()) + (int(num_samples), int(total_size))
    known = SHUFFLE_DRAWS.get(full)
    if known is None:
        generator = seeded(draws.seed)
        generator.set_state(draws.state)
        known = build_shuffle_index(num_samples, total_size, generator)
        if total_size > MAX_MEMO_ITEMS:
            return known
        SHUFFLE_DRAWS.put(full, known)
    copy: numpy.ndarray = known.copy()  # the memo's array stays untouched
    return copy
