"""Index kernels of the GPT and blended datasets, bit-identical with megatron-core 0.16.1.

Public functions (fast numba kernels when numba is installed, otherwise the readable
versions in :mod:`tokenloom.index.reference`):

- :func:`build_blending_indices`, :func:`build_exhaustive_blending_indices`
- :func:`build_document_index`, :func:`build_sample_index`, :func:`build_shuffle_index`
- :func:`num_epochs_needed` (megatron's epoch count without its infinite loop)
- :func:`legacy_shuffle` (``RandomState.shuffle``'s permutation and generator state,
  about 3x faster on long arrays)
"""

from tokenloom.index.blending import build_blending_indices, build_exhaustive_blending_indices
from tokenloom.index.document import build_document_index
from tokenloom.index.sample import build_sample_index, num_epochs_needed
from tokenloom.index.shuffle import build_shuffle_index, legacy_shuffle

__all__ = [
    "build_blending_indices",
    "build_exhaustive_blending_indices",
    "build_document_index",
    "build_sample_index",
    "build_shuffle_index",
    "legacy_shuffle",
    "num_epochs_needed",
]
