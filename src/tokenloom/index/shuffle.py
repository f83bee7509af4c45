"""The GPT shuffle index, and the fast in-place shuffle both GPT indices use.

:func:`build_shuffle_index`: same output as megatron-core 0.16.1's
``gpt_dataset._build_shuffle_index`` (uint32, or int64 for very large indices) for the
same ``numpy.random.RandomState``, built in one array: both ranges are shuffled in
place, so no concatenation copy is needed.

:func:`legacy_shuffle`: ``RandomState.shuffle`` of a large 1-D array by the numba
kernel in :mod:`tokenloom.kernels.shuffle` (same permutation, same generator state
afterwards), numpy's own shuffle otherwise (:func:`tokenloom.index.dispatch.shuffle_route`).
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import dispatch
from tokenloom.index._common import shuffle_index_inputs
from tokenloom.kernels import KERNELS

__all__ = ["build_shuffle_index", "legacy_shuffle"]


def build_shuffle_index(
    num_samples: int, total_size: int, numpy_random_state: numpy.random.RandomState
) -> numpy.ndarray:
    """``[0, total_size)`` with ``[0, num_samples)`` and ``[num_samples, total_size)``
    each shuffled on its own, in that order.

    Raises:
        ConfigError: negative sizes, ``num_samples > total_size`` or a generator that is
            not a ``numpy.random.RandomState``.
    """
    num_samples, total_size, dtype = shuffle_index_inputs(
        num_samples, total_size, numpy_random_state
    )
    index: numpy.ndarray = numpy.arange(0, total_size, 1, dtype=dtype)
    legacy_shuffle(numpy_random_state, index[:num_samples])
    if num_samples != total_size:
        legacy_shuffle(numpy_random_state, index[num_samples:])
    return index


def legacy_shuffle(random_state: numpy.random.RandomState, x: Any) -> None:
    """``random_state.shuffle(x)``: the same permutation of ``x`` (in place) and the
    same generator state afterwards, faster on long 1-D arrays.

    The numba kernel runs where :func:`~tokenloom.index.dispatch.shuffle_route` says
    so; everything else, and unavailable kernels, goes to ``random_state.shuffle``.
    Like numpy's it is not safe to share ``random_state`` with another thread during
    the call.
    """
    fast = None
    if dispatch.shuffle_route(random_state, x) == dispatch.KERNEL:
        fast = KERNELS.get("shuffle")
    state = random_state.get_state(legacy=False) if fast is not None else None
    if fast is None or state is None or state.get("bit_generator") != "MT19937":
        random_state.shuffle(x)
        return
    key = numpy.array(state["state"]["key"], dtype=numpy.uint32)  # a private copy
    pos = numpy.array([state["state"]["pos"]], dtype=numpy.int64)
    fast.shuffle(x.view(numpy.dtype(f"u{x.dtype.itemsize}")), key, pos, fast.BLOCK)
    state["state"] = {"key": key, "pos": int(pos[0])}
    random_state.set_state(state)  # has_gauss and gauss go back unchanged
