"""``megatron.core.datasets.blended_megatron_dataset_builder``: every split of a config.

tokenloom's builder (rank 0 builds, the other ranks load; same splits, blends and sizes
as megatron-core), building the compat layer's ``BlendedDataset`` and
``MockGPTDataset``, with errors that are also ``AssertionError``s.
"""

from __future__ import annotations

import logging
from typing import Union

from tokenloom.builder import megatron as _builder
from tokenloom.datasets import gpt as _gpt
from tokenloom.megatron.datasets.blended_dataset import BlendedDataset
from tokenloom.megatron.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from tokenloom.megatron.datasets.megatron_dataset import LowLevelDataset, MegatronDataset
from tokenloom.megatron.datasets.utils import Split, log_single_rank, normalize
from tokenloom.megatron.errors import translate_errors

__all__ = [
    "BlendedDataset",
    "BlendedMegatronDatasetBuilder",
    "BlendedMegatronDatasetConfig",
    "DistributedDataset",
    "GPTDatasetConfig",
    "LowLevelDataset",
    "MegatronDataset",
    "MidLevelDataset",
    "Split",
    "TopLevelDataset",
    "_get_size_per_split_per_dataset",
    "log_single_rank",
    "normalize",
]

logger = logging.getLogger(__name__)

MidLevelDataset = MegatronDataset
TopLevelDataset = Union[BlendedDataset, MidLevelDataset]
DistributedDataset = Union[TopLevelDataset, MidLevelDataset, LowLevelDataset]

_get_size_per_split_per_dataset = _builder.get_size_per_split_per_dataset


@translate_errors("__init__", "build", "build_generic_dataset")
class BlendedMegatronDatasetBuilder(_builder.BlendedMegatronDatasetBuilder):
    """megatron-core's ``BlendedMegatronDatasetBuilder`` (tokenloom's, see its docstring)."""

    blended_dataset_class = BlendedDataset
    mock_substitutes = ((GPTDataset, MockGPTDataset), (_gpt.GPTDataset, MockGPTDataset))
