"""The GPT document index: the documents of every epoch, shuffled.

Same output as megatron-core 0.16.1's ``gpt_dataset._build_document_index`` for the
same ``numpy.random.RandomState`` (and it leaves the generator in the same state), but
built without the ``numpy.mgrid`` temporaries (peak memory is the int32 result itself)
and shuffled by :func:`tokenloom.index.shuffle.legacy_shuffle` (numba when large).
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index._common import document_index_inputs
from tokenloom.index.shuffle import legacy_shuffle

__all__ = ["build_document_index"]


def build_document_index(
    documents: Any,
    num_epochs: int,
    numpy_random_state: numpy.random.RandomState,
    separate_final_epoch: bool,
) -> numpy.ndarray:
    """``documents`` repeated ``num_epochs`` times (int32) and shuffled.

    Args:
        documents: the document ids of the split.
        num_epochs: how many times to repeat them, >= 1.
        numpy_random_state: the generator; consumed exactly like megatron-core does.
        separate_final_epoch: shuffle the last epoch on its own, after the others
            (only matters with more than one epoch).

    Raises:
        ConfigError: documents not 1-D integers in int32 range, num_epochs < 1, or a
            generator that is not a ``numpy.random.RandomState``.
    """
    documents, num_epochs = document_index_inputs(documents, num_epochs, numpy_random_state)
    count = documents.size
    index = numpy.empty(num_epochs * count, dtype=numpy.int32)
    index.reshape(num_epochs, count)[:] = documents  # broadcast: no int64 temporaries
    if separate_final_epoch and num_epochs > 1:
        legacy_shuffle(numpy_random_state, index[: (num_epochs - 1) * count])
        legacy_shuffle(numpy_random_state, index[(num_epochs - 1) * count :])
    else:
        legacy_shuffle(numpy_random_state, index)
    return index
