"""Argument handling shared by the fast and the reference GPT index builders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from tokenloom.errors import ConfigError
from tokenloom.index import arguments

_INT32_MAX = int(numpy.iinfo(numpy.int32).max)
_UINT32_MAX = int(numpy.iinfo(numpy.uint32).max)


@dataclass(frozen=True)
class SamplePlan:
    """Validated inputs of the sample-index kernel and the shape of its output."""

    sizes: numpy.ndarray
    documents: numpy.ndarray
    sequence_length: int
    extra: int
    num_samples: int
    total_tokens: int
    dtype: type

    def raise_token_mismatch(self, actual: int) -> None:
        raise ConfigError(
            f"num_epochs * tokens_per_epoch = {self.total_tokens} but the documents of "
            f"document_index hold {actual} tokens; pass tokens_per_epoch = "
            "sum(sequence_lengths[documents of one epoch])"
        )

    def raise_out_of_documents(self, sample: int) -> None:
        raise ConfigError(
            f"document_index ran out of tokens at sample {sample} of {self.num_samples}; "
            "tokens_per_epoch does not match the documents"
        )

    def raise_negative_offset(self) -> None:
        raise ConfigError(
            "the last document of document_index is shorter than "
            "add_extra_token_to_sequence, so the final partial sample would start at a "
            "negative offset; drop empty documents or keep drop_last_partial_sequence=True"
        )


def count_samples(total_tokens: int, sequence_length: int, extra: int, drop_last: bool) -> int:
    """Number of samples exactly as helpers.cpp computes it (float32 when rounding up)."""
    numerator = total_tokens - extra
    if drop_last:
        return numerator // sequence_length  # numerator > 0: truncation == floor
    quotient = numpy.float32(numerator) / numpy.float32(sequence_length)
    return int(numpy.ceil(quotient))


def sample_index_plan(
    sequence_lengths: Any,
    document_index: Any,
    sequence_length: Any,
    num_epochs: Any,
    tokens_per_epoch: Any,
    drop_last_partial_sequence: Any,
    add_extra_token_to_sequence: Any,
    check_values: bool = True,
) -> SamplePlan:
    """Validate the arguments of ``build_sample_index`` and size its output."""
    sequence_length = arguments.as_int(sequence_length, "sequence_length", minimum=1)
    num_epochs = arguments.as_int(num_epochs, "num_epochs", minimum=1)
    tokens_per_epoch = arguments.as_int(tokens_per_epoch, "tokens_per_epoch", minimum=1)
    if sequence_length > _INT32_MAX or num_epochs > _INT32_MAX:
        raise ConfigError(
            f"sequence_length ({sequence_length}) and num_epochs ({num_epochs}) must fit int32"
        )
    drop_last = bool(arguments.as_flag(drop_last_partial_sequence, "drop_last_partial_sequence"))
    extra = arguments.as_flag(add_extra_token_to_sequence, "add_extra_token_to_sequence")
    sizes, documents = arguments.sample_index_inputs(sequence_lengths, document_index, check_values)
    total_tokens = num_epochs * tokens_per_epoch
    num_samples = count_samples(total_tokens, sequence_length, extra, drop_last)
    largest = max(documents.size, int(sizes.max()))
    dtype = numpy.int32 if largest <= _INT32_MAX else numpy.int64
    return SamplePlan(sizes, documents, sequence_length, extra, num_samples, total_tokens, dtype)


def document_index_inputs(
    documents: Any, num_epochs: Any, numpy_random_state: Any
) -> tuple[numpy.ndarray, int]:
    """Validate the arguments of ``build_document_index``."""
    documents = arguments.int_array(documents, "documents")
    num_epochs = arguments.as_int(num_epochs, "num_epochs", minimum=1)
    if not isinstance(numpy_random_state, numpy.random.RandomState):
        raise ConfigError(
            "numpy_random_state must be a numpy.random.RandomState (megatron-core's "
            f"generator), got {type(numpy_random_state).__name__}"
        )
    if documents.size and (int(documents.min()) < 0 or int(documents.max()) > _INT32_MAX):
        raise ConfigError(
            f"documents must hold ids in [0, {_INT32_MAX}], got "
            f"[{int(documents.min())}, {int(documents.max())}]"
        )
    return documents, num_epochs


def shuffle_index_inputs(
    num_samples: Any, total_size: Any, numpy_random_state: Any
) -> tuple[int, int, type]:
    """Validate the arguments of ``build_shuffle_index``; also returns its dtype."""
    num_samples = arguments.as_int(num_samples, "num_samples", minimum=0)
    total_size = arguments.as_int(total_size, "total_size", minimum=0)
    if num_samples > total_size:
        raise ConfigError(f"num_samples ({num_samples}) must not exceed total_size ({total_size})")
    if not isinstance(numpy_random_state, numpy.random.RandomState):
        raise ConfigError(
            "numpy_random_state must be a numpy.random.RandomState, got "
            f"{type(numpy_random_state).__name__}"
        )
    dtype = numpy.uint32 if total_size < _UINT32_MAX - 1 else numpy.int64
    return num_samples, total_size, dtype
