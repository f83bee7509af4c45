"""The GPT sample index: where in the shuffled documents each sample starts.

Same output as megatron-core 0.16.1's ``helpers.build_sample_idx`` (bit for bit,
including the int32/int64 choice), computed by a numba kernel when numba is installed.
"""

from __future__ import annotations

from typing import Any

import numpy

from tokenloom.index import _jit, reference
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
    fast = _jit.kernels("_kernels")
    if fast is None:
        return reference.build_sample_index(
            sequence_lengths,
            document_index,
            sequence_length,
            num_epochs,
            tokens_per_epoch,
            drop_last_partial_sequence,
            add_extra_token_to_sequence,
        )
    plan = sample_index_plan(
        sequence_lengths,
        document_index,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
    )
    actual = int(fast.document_tokens(plan.sizes, plan.documents))
    if actual != plan.total_tokens:
        plan.raise_token_mismatch(actual)
    out = numpy.empty((plan.num_samples + 1, 2), dtype=plan.dtype)
    status = fast.sample_index(plan.sizes, plan.documents, plan.sequence_length, plan.extra, out)
    if status == fast.OUT_OF_DOCUMENTS:  # pragma: no cover - excluded by the token check
        plan.raise_out_of_documents(-1)
    if status == fast.NEGATIVE_OFFSET:
        plan.raise_negative_offset()
    return out


def num_epochs_needed(
    tokens_per_epoch: int, num_samples: int, sequence_length: int, add_extra_token_to_sequence: int
) -> int:
    """Epochs megatron-core's ``GPTDataset._get_num_epochs`` would count, in O(1).

    Raises ConfigError instead of looping forever when an epoch holds no token.
    """
    from tokenloom.errors import ConfigError
    from tokenloom.index import _validate

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
