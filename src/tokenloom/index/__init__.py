"""Index kernels of the GPT and blended datasets, bit-identical with megatron-core 0.16.1.

Public functions; :mod:`tokenloom.index.dispatch` is the table of which implementation
runs for which inputs (numpy, or the numba kernels of :mod:`tokenloom.kernels`, each
with its readable twin in :mod:`tokenloom.index.reference`), and
:mod:`tokenloom.index.validate` the validator of sample positions and index arrays:

- :func:`build_blending_indices`, :func:`build_exhaustive_blending_indices`
- :func:`build_document_index`, :func:`build_sample_index`, :func:`build_shuffle_index`
- :func:`num_epochs_needed` (megatron's epoch count without its infinite loop)
- :func:`legacy_shuffle` (``RandomState.shuffle``'s permutation and generator state,
  faster on long arrays)
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
