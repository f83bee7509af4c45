"""``megatron.core.datasets.blended_dataset``: a weighted blend of mid-level datasets.

tokenloom's ``BlendedDataset`` (same indices and cache), whose samples are those of the
compat datasets it blends (torch tensors) plus ``dataset_id``, and whose errors are also
``AssertionError``s.
"""

from __future__ import annotations

import logging

from tokenloom.datasets import blended as _blended
from tokenloom.megatron.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from tokenloom.megatron.datasets.megatron_dataset import MegatronDataset
from tokenloom.megatron.datasets.utils import log_single_rank, normalize
from tokenloom.megatron.errors import translate_errors
from tokenloom.megatron.pickling import StaysInstalled

__all__ = [
    "BlendedDataset",
    "BlendedMegatronDatasetConfig",
    "MegatronDataset",
    "log_single_rank",
    "normalize",
]

logger = logging.getLogger(__name__)

_VERBOSE = False
"""megatron-core's switch for the C++ blending helper's progress output (unused here)."""


@translate_errors("__init__", "__getitem__", "__len__")
class BlendedDataset(StaysInstalled, _blended.BlendedDataset):
    """megatron-core's ``BlendedDataset``: ``{"dataset_id": ..., **datasets[id][sample]}``."""
