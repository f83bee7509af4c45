"""The GPT sample index: where in the shuffled documents each sample starts.

Same output as megatron-core 0.16.1's ``helpers.build_sample_idx`` (bit for bit,
including the int32/int64 choice), computed by a numba kernel when numba is installed.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import _jit, _validate, reference
from tokenloom.index._common import sample_index_plan

__all__ = ["build_sample_index", "num_epochs_needed"]


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
    fast = _jit.kernels("_kernels")
    if fast is None:
        return reference.build_sample_index(*arguments)
    # the kernel checks document ids and lengths during its single pass
    return _fast_sample_index(fast, sample_index_plan(*arguments, check_values=False))


def _fast_sample_index(fast, plan) -> numpy.ndarray:
    """Run the numba kernel and turn its status into the reference's errors."""
    out = numpy.empty((plan.num_samples + 1, 2), dtype=plan.dtype)
    status, value = fast.sample_index(
        plan.sizes, plan.documents, plan.sequence_length, plan.extra, out
    )
    if status == fast.BAD_DOCUMENT:
        raise _validate.bad_document(plan.sizes, plan.documents, int(value))
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

    tokens_per_epoch = _validate.as_int(tokens_per_epoch, "tokens_per_epoch", minimum=0)
    num_samples = _validate.as_int(num_samples, "num_samples", minimum=0)
    sequence_length = _validate.as_int(sequence_length, "sequence_length", minimum=1)
    extra = _validate.as_flag(add_extra_token_to_sequence, "add_extra_token_to_sequence")
    requested = num_samples * sequence_length + extra
    if tokens_per_epoch >= requested:
        return 1
    if tokens_per_epoch == 0:
        raise ConfigError(
            f"{num_samples} samples were requested from a split whose documents hold no "
            "token (empty document range); give the split documents or request 0 samples"
        )
    return -(-requested // tokens_per_epoch)
