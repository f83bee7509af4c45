"""The GPT shuffle index: a permutation of the samples.

Same output as megatron-core 0.16.1's ``gpt_dataset._build_shuffle_index`` (uint32, or
int64 for very large indices) for the same ``numpy.random.RandomState``, built in one
array: both ranges are shuffled in place, so no concatenation copy is needed.
"""

from __future__ import annotations

import numpy

from tokenloom.index._common import shuffle_index_inputs

__all__ = ["build_shuffle_index"]


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
    numpy_random_state.shuffle(index[:num_samples])
    if num_samples != total_size:
        numpy_random_state.shuffle(index[num_samples:])
    return index
