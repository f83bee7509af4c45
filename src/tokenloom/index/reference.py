"""Readable reference versions of every index kernel.

These are written for clarity, not speed: each one follows megatron-core 0.16.1's
``helpers.cpp`` / ``gpt_dataset.py`` step by step (same float64 arithmetic, same
tie-breaking, same dtypes, same use of ``numpy.random.RandomState``).  The fast
kernels in this package must agree with them exactly; the property tests in
``tests/index`` check that on random and adversarial inputs.

They validate their inputs like the public functions, so they are safe to call
directly, e.g. when numba is not installed.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import arguments
from tokenloom.index._common import (
    document_index_inputs,
    sample_index_plan,
    shuffle_index_inputs,
)
from tokenloom.index._targets import ScheduleArrays, eligible, phase_offsets, targets_in

__all__ = [
    "build_blending_indices",
    "build_exhaustive_blending_indices",
    "build_scheduled_blending_indices",
    "build_sample_index",
    "build_document_index",
    "build_shuffle_index",
]


def build_blending_indices(weights: Any, size: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Greedy weighted interleaving of datasets.

    Sample ``t`` goes to the dataset whose "error" ``weights[i] * max(t, 1) - count[i]``
    (float64) is largest; on equal errors the lowest dataset id wins.  Returns the
    dataset id (int16) and the running per-dataset sample number (int64) of every sample.
    """
    weights = arguments.blending_weights(weights)
    size = arguments.as_int(size, "size", minimum=0)
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    counts = numpy.zeros(weights.size, dtype=numpy.int64)
    for t in range(size):
        s = max(float(t), 1.0)
        errors = weights * s - counts.astype(numpy.float64)
        winner = int(numpy.argmax(errors))  # first maximum: lowest id wins ties
        dataset_index[t] = winner
        dataset_sample_index[t] = counts[winner]
        counts[winner] += 1
    return dataset_index, dataset_sample_index


def build_exhaustive_blending_indices(sizes: Any) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Interleave exactly ``sizes[i]`` samples of every dataset ``i``.

    Same greedy as :func:`build_blending_indices` with weights ``sizes / sum(sizes)``,
    except that a dataset leaves the race once all its samples are placed.
    """
    sizes = arguments.exhaustive_sizes(sizes)
    total = int(sizes.sum())
    weights = sizes.astype(numpy.float64) / float(total)
    dataset_index = numpy.zeros(total, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(total, dtype=numpy.int64)
    counts = numpy.zeros(sizes.size, dtype=numpy.int64)
    spent = numpy.zeros(sizes.size, dtype=bool)
    for t in range(total):
        s = max(float(t), 1.0)
        errors = weights * s - counts.astype(numpy.float64)
        errors[spent] = -numpy.inf  # spent datasets never win
        winner = int(numpy.argmax(errors))
        dataset_index[t] = winner
        dataset_sample_index[t] = counts[winner]
        counts[winner] += 1
        spent[winner] = counts[winner] == sizes[winner]
    return dataset_index, dataset_sample_index


def build_scheduled_blending_indices(
    schedule: ScheduleArrays, size: int
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Greedy interleaving by a mixture schedule (validated arrays, see
    :mod:`tokenloom.index.schedule`): sample ``t`` goes to the dataset, among those whose
    weight at ``t`` is > 0, with the largest ``target(t) - count`` (float64), the lowest
    id winning ties; ``target`` is the cumulative scheduled weight, so the error carries
    across phase changes."""
    starts = schedule[0]
    offsets = phase_offsets(schedule)
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    counts = numpy.zeros(schedule[1].shape[1], dtype=numpy.int64)
    p = 0
    for t in range(size):
        while p + 1 < starts.size and t >= starts[p + 1]:
            p += 1
        errors = targets_in(schedule, offsets, p, t) - counts.astype(numpy.float64)
        errors[~eligible(schedule, p, t)] = -numpy.inf  # weight 0 now: never drawn
        winner = int(numpy.argmax(errors))  # first maximum: lowest id wins ties
        dataset_index[t] = winner
        dataset_sample_index[t] = counts[winner]
        counts[winner] += 1
    return dataset_index, dataset_sample_index


def build_sample_index(
    sequence_lengths: Any,
    document_index: Any,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> numpy.ndarray:
    """Cut the concatenated documents into samples.

    Row ``k`` of the result is ``(position in document_index, token offset in that
    document)`` where sample ``k`` starts; row ``k + 1`` is where it ends (a sample
    spans ``sequence_length + add_extra_token_to_sequence`` tokens, consecutive
    samples share ``add_extra_token_to_sequence`` tokens).
    """
    plan = sample_index_plan(
        sequence_lengths,
        document_index,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
    )
    sizes, documents = plan.sizes, plan.documents
    if int(sizes[documents].sum(dtype=numpy.int64)) != plan.total_tokens:
        plan.raise_token_mismatch(int(sizes[documents].sum(dtype=numpy.int64)))
    out: numpy.ndarray = numpy.zeros((plan.num_samples + 1, 2), dtype=plan.dtype)
    last = documents.size - 1
    position, offset = 0, 0  # where the next sample starts
    for k in range(1, plan.num_samples + 1):
        needed = sequence_length + plan.extra  # tokens this sample still has to cover
        while True:
            available = int(sizes[documents[position]]) - offset
            if available >= needed:  # the sample ends inside this document
                offset += needed - plan.extra
                break
            needed -= available
            if position == last:  # out of documents: the sample stops at the end; a
                # float32 count one or more above the exact one (see count_samples) repeats
                # that end, as megatron-core does
                offset = int(sizes[documents[position]]) - plan.extra
                break
            position, offset = position + 1, 0
        if offset < 0:
            plan.raise_negative_offset()
        out[k] = (position, offset)
    return out


def build_document_index(
    documents: Any,
    num_epochs: int,
    numpy_random_state: numpy.random.RandomState,
    separate_final_epoch: bool,
) -> numpy.ndarray:
    """``documents`` repeated ``num_epochs`` times as int32, shuffled by the RNG.

    With ``separate_final_epoch`` (and more than one epoch) the first ``num_epochs - 1``
    epochs are shuffled together and the last epoch on its own, after them.
    """
    documents, num_epochs = document_index_inputs(documents, num_epochs, numpy_random_state)
    if not separate_final_epoch or num_epochs == 1:
        index = numpy.mgrid[0:num_epochs, 0 : documents.size][1]
        index[:] = documents
        index = numpy.asarray(index.reshape(-1).astype(numpy.int32))
        numpy_random_state.shuffle(index)
        return index
    first = build_document_index(documents, num_epochs - 1, numpy_random_state, False)
    last = build_document_index(documents, 1, numpy_random_state, False)
    return numpy.concatenate((first, last))


def build_shuffle_index(
    num_samples: int, total_size: int, numpy_random_state: numpy.random.RandomState
) -> numpy.ndarray:
    """``[0, total_size)`` with ``[0, num_samples)`` and the rest shuffled separately."""
    num_samples, total_size, dtype = shuffle_index_inputs(
        num_samples, total_size, numpy_random_state
    )
    first: numpy.ndarray = numpy.arange(0, num_samples, 1, dtype=dtype)
    numpy_random_state.shuffle(first)
    if num_samples == total_size:
        return first
    last: numpy.ndarray = numpy.arange(num_samples, total_size, 1, dtype=dtype)
    numpy_random_state.shuffle(last)
    return numpy.concatenate((first, last))
