"""The GPT sample index: where in the shuffled documents each sample starts.

Same output as megatron-core 0.16.1's ``helpers.build_sample_idx`` (bit for bit,
including the int32/int64 choice): by cumulative sums for short document indices, by
the one-pass numba kernel otherwise (:mod:`tokenloom.index.dispatch`).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from types import ModuleType
from typing import Any

import numpy

from tokenloom.index import arguments, dispatch, reference
from tokenloom.index._common import SamplePlan, sample_index_plan
from tokenloom.kernels import KERNELS, read_only

__all__ = [
    "build_sample_index",
    "build_sample_index_small",
    "build_sample_index_vectorized",
    "num_epochs_needed",
]


def build_sample_index(
    sequence_lengths: Any,
    document_index: Any,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> numpy.ndarray:
    """Build the ``[num_samples + 1, 2]`` sample index.

    Args:
        sequence_lengths: token count of every document of the low-level dataset.
        document_index: the (shuffled) order of documents over all epochs.
        sequence_length: tokens per sample, > 1.
        num_epochs: epochs contained in ``document_index``, > 0.
        tokens_per_epoch: tokens in one epoch; ``num_epochs * tokens_per_epoch`` must
            equal ``sum(sequence_lengths[document_index])``.
        drop_last_partial_sequence: drop a final sample that would be short.
        add_extra_token_to_sequence: 1 (or True) when each sample carries one extra
            token for the shifted labels, else 0.

    Returns:
        Row ``k`` = ``(position in document_index, token offset)`` where sample ``k``
        starts, row ``k + 1`` where it ends.  int32 unless
        ``max(len(document_index), max(sequence_lengths))`` exceeds int32, then int64.

    Raises:
        ConfigError: invalid arguments, an empty ``document_index``, document ids out
            of range, or token counts that do not add up.
    """
    arguments = (
        sequence_lengths,
        document_index,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
    )
    route = dispatch.sample_index_route(document_index)
    if route == dispatch.SMALL:
        return build_sample_index_small(*arguments)
    if route == dispatch.VECTORIZED:
        return build_sample_index_vectorized(*arguments)
    fast = KERNELS.get("sample_index")
    if fast is None:
        return reference.build_sample_index(*arguments)
    # the kernel checks document ids and lengths during its single pass
    return _fast_sample_index(fast, sample_index_plan(*arguments, check_values=False))


def build_sample_index_vectorized(
    sequence_lengths: Any,
    document_index: Any,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> numpy.ndarray:
    """:func:`build_sample_index` by cumulative sums (same output and errors).

    Sample ``k`` ends (and ``k + 1`` starts) at token ``k * sequence_length`` of the
    concatenated documents; its row is the first document whose end reaches token
    ``k * sequence_length + extra`` and the offset of that token in it. Only the last
    sample of a kept partial sequence runs out of documents: it ends at the last
    document's end minus ``extra`` (and so does every sample that megatron-core's float32
    count adds beyond the exact count, which repeat that end). O(samples + documents) memory: for short indices.
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
    lengths = plan.sizes[plan.documents].astype(numpy.int64)
    ends = numpy.cumsum(lengths)
    total = int(ends[-1]) if ends.size else 0
    if total != plan.total_tokens:
        plan.raise_token_mismatch(total)
    count = plan.num_samples
    reach = numpy.arange(1, count + 1, dtype=numpy.int64) * plan.sequence_length + plan.extra
    position = numpy.searchsorted(ends, reach, side="left")
    out: numpy.ndarray = numpy.zeros((count + 1, 2), dtype=plan.dtype)
    if count and position[-1] >= ends.size:  # runs out of documents: the last sample, and
        # every sample a float32 count adds beyond the exact one (count_samples), ends at
        # the last document's end, as megatron-core's repeat it
        beyond = position >= ends.size
        last = ends.size - 1
        position[beyond], reach[beyond] = last, ends[last]  # offset: its length - extra
    offset = reach - plan.extra - (ends[position] - lengths[position])
    if count and int(offset.min()) < 0:
        plan.raise_negative_offset()
    out[1:, 0] = position
    out[1:, 1] = offset
    return out


def build_sample_index_small(
    sequence_lengths: Any,
    document_index: Any,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> numpy.ndarray:
    """:func:`build_sample_index_vectorized` in Python integers (same output and errors),
    for document indices of a few hundred documents: a numpy call costs a microsecond or
    more whatever its size, a Python step a few tens of nanoseconds, and a cold start over
    thousands of small prefixes builds one such index per prefix."""
    arguments = (
        sequence_lengths,
        document_index,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
    )
    plan = sample_index_plan(*arguments, check_values=False)
    if plan.num_samples > dispatch.SAMPLE_SMALL_MAX_SAMPLES:  # a Python step per sample
        return build_sample_index_vectorized(*arguments)
    return _cut_in_python(plan)


def _cut_in_python(plan: SamplePlan) -> numpy.ndarray:
    """:func:`build_sample_index_small`'s rows of a plan made without the value checks."""
    documents = plan.documents.tolist()
    low, high = min(documents), max(documents)
    if low < 0 or high >= plan.sizes.shape[0]:
        raise arguments.documents_out_of_range(low, high, plan.sizes.shape[0])
    lengths = plan.sizes[plan.documents].tolist()
    if min(lengths) < 0:
        raise arguments.bad_document(plan.sizes, plan.documents, lengths.index(min(lengths)))
    ends = list(accumulate(lengths))
    if ends[-1] != plan.total_tokens:
        plan.raise_token_mismatch(ends[-1])
    rows = [(0, 0)]
    last, extra, step = len(ends) - 1, plan.extra, plan.sequence_length
    for k in range(1, plan.num_samples + 1):
        reach = k * step + extra
        position = bisect_left(ends, reach)
        if position > last:  # out of documents: ends at the last document's end
            position, reach = last, ends[last]
        offset = reach - extra - (ends[position] - lengths[position])
        if offset < 0:
            plan.raise_negative_offset()
        rows.append((position, offset))
    return numpy.array(rows, dtype=plan.dtype)


def _fast_sample_index(fast: ModuleType, plan: SamplePlan) -> numpy.ndarray:
    """Run the numba kernel and turn its status into the reference's errors."""
    out: numpy.ndarray = numpy.empty((plan.num_samples + 1, 2), dtype=plan.dtype)
    status, value = fast.sample_index(
        read_only(plan.sizes), read_only(plan.documents), plan.sequence_length, plan.extra, out
    )
    if status == fast.BAD_DOCUMENT:
        raise arguments.bad_document(plan.sizes, plan.documents, int(value))
    if status != fast.OK:  # report a token mismatch first, as the reference does
        value = int(fast.remaining_tokens(plan.sizes, plan.documents, 0))
    if int(value) != plan.total_tokens:
        plan.raise_token_mismatch(int(value))
    if status == fast.NEGATIVE_OFFSET:
        plan.raise_negative_offset()
    if status != fast.OK:  # pragma: no cover - out of documents implies a token mismatch
        plan.raise_out_of_documents(-1)
    return out


def num_epochs_needed(
    tokens_per_epoch: int, num_samples: int, sequence_length: int, add_extra_token_to_sequence: int
) -> int:
    """Epochs megatron-core's ``GPTDataset._get_num_epochs`` would count, in O(1).

    Raises ConfigError instead of looping forever when an epoch holds no token.
    """
    from tokenloom.errors import ConfigError

    tokens_per_epoch = arguments.as_int(tokens_per_epoch, "tokens_per_epoch", minimum=0)
    num_samples = arguments.as_int(num_samples, "num_samples", minimum=0)
    sequence_length = arguments.as_int(sequence_length, "sequence_length", minimum=1)
    extra = arguments.as_flag(add_extra_token_to_sequence, "add_extra_token_to_sequence")
    requested = num_samples * sequence_length + extra
    if tokens_per_epoch >= requested:
        return 1
    if tokens_per_epoch == 0:
        raise ConfigError(
            f"{num_samples} samples were requested from a split whose documents hold no "
            "token (empty document range); give the split documents or request 0 samples"
        )
    return -(-requested // tokens_per_epoch)
