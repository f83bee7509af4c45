"""``megatron.core.datasets.helpers``: ``build_sample_idx`` and the compiled helpers.

The compiled functions come from :mod:`tokenloom.megatron.datasets.helpers_cpp`
(tokenloom's kernels, no C++ build).
"""

from __future__ import annotations

import numpy

from tokenloom.megatron.datasets.helpers_cpp import (
    build_blending_indices,
    build_blocks_mapping,
    build_exhaustive_blending_indices,
    build_mapping,
    build_sample_idx_int32,
    build_sample_idx_int64,
)

__all__ = [
    "build_blending_indices",
    "build_blocks_mapping",
    "build_exhaustive_blending_indices",
    "build_mapping",
    "build_sample_idx",
    "build_sample_idx_int32",
    "build_sample_idx_int64",
]


def build_sample_idx(
    sizes: numpy.ndarray,
    document_indices: numpy.ndarray,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: bool = True,
) -> numpy.ndarray:
    """The 2-D sample index: int32 when every value fits, else int64 (megatron-core's rule:
    the larger of the document count and the longest document decides)."""
    sizes, document_indices = numpy.asarray(sizes), numpy.asarray(document_indices)
    largest = max(document_indices.shape[0], int(sizes.max()) if sizes.size else 0)
    build = (
        build_sample_idx_int32
        if largest <= numpy.iinfo(numpy.int32).max
        else build_sample_idx_int64
    )
    return build(
        sizes,
        document_indices,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        1 if add_extra_token_to_sequence else 0,
    )
