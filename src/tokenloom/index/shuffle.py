"""The GPT shuffle index, and the fast in-place shuffle both GPT indices use.

:func:`build_shuffle_index`: same output as megatron-core 0.16.1's
``gpt_dataset._build_shuffle_index`` (uint32, or int64 for very large indices) for the
same ``numpy.random.RandomState``, built in one array: both ranges are shuffled in
place, so no concatenation copy is needed.

:func:`legacy_shuffle`: ``RandomState.shuffle`` of a large 1-D array by the numba
kernel in :mod:`tokenloom.index._shuffle_kernel` (same permutation, same generator
state afterwards), numpy's own shuffle otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import _jit
from tokenloom.index._common import shuffle_index_inputs

__all__ = ["build_shuffle_index", "legacy_shuffle", "FAST_SHUFFLE_MIN_SIZE"]

FAST_SHUFFLE_MIN_SIZE = 8192
"""Arrays shorter than this are shuffled by numpy: reading and writing the generator
state (about 0.1 ms) costs more than the kernel saves on them (measured)."""


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
    index = numpy.arange(0, total_size, 1, dtype=dtype)
    legacy_shuffle(numpy_random_state, index[:num_samples])
    if num_samples != total_size:
        legacy_shuffle(numpy_random_state, index[num_samples:])
    return index


def legacy_shuffle(random_state: numpy.random.RandomState, x: Any) -> None:
    """``random_state.shuffle(x)``: the same permutation of ``x`` (in place) and the
    same generator state afterwards, faster on long 1-D arrays.

    The numba kernel runs on writeable C-contiguous 1-D ndarrays of at least
    :data:`FAST_SHUFFLE_MIN_SIZE` plain (non-object) items of 1, 2, 4 or 8 bytes, with
    an MT19937 generator; everything else, and ``TOKENLOOM_DISABLE_NUMBA=1`` or a
    missing numba, goes to ``random_state.shuffle``. Like numpy's it is not safe to
    share ``random_state`` with another thread during the call.
    """
    fast = _jit.kernels("_shuffle_kernel") if _kernel_fits(random_state, x) else None
    state = random_state.get_state(legacy=False) if fast is not None else None
    if state is None or state.get("bit_generator") != "MT19937":
        random_state.shuffle(x)
        return
    key = numpy.array(state["state"]["key"], dtype=numpy.uint32)  # a private copy
    pos = numpy.array([state["state"]["pos"]], dtype=numpy.int64)
    fast.shuffle(x.view(numpy.dtype(f"u{x.dtype.itemsize}")), key, pos, fast.BLOCK)
    state["state"] = {"key": key, "pos": int(pos[0])}
    random_state.set_state(state)  # has_gauss and gauss go back unchanged


def _kernel_fits(random_state: Any, x: Any) -> bool:
    """Whether ``x`` and ``random_state`` are of the kind the kernel shuffles."""
    return (
        type(random_state) is numpy.random.RandomState
        and type(x) is numpy.ndarray
        and x.ndim == 1
        and x.shape[0] >= FAST_SHUFFLE_MIN_SIZE
        and x.flags.c_contiguous
        and x.flags.writeable
        and not x.dtype.hasobject
        and x.dtype.itemsize in (1, 2, 4, 8)
    )
