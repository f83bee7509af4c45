"""``megatron.core.datasets.megatron_dataset``: the base of the mid-level datasets.

``MegatronDataset`` is tokenloom's own base class (not a copy), so every dataset of the
compat layer, and every Megatron-LM subclass of it (``SFTDataset``, ...), is an
instance of it whichever name it was imported by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Union

from tokenloom.datasets.megatron_dataset import PAD_TOKEN_ID as _PAD_TOKEN_ID
from tokenloom.datasets.megatron_dataset import MegatronDataset
from tokenloom.format import IndexedDataset
from tokenloom.megatron.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from tokenloom.megatron.datasets.utils import Split

__all__ = [
    "BlendedMegatronDatasetConfig",
    "IndexedDataset",
    "LowLevelDataset",
    "MegatronDataset",
    "Split",
    "_PAD_TOKEN_ID",
]

LowLevelDataset = Union[IndexedDataset, Iterable]
"""What a mid-level dataset is built over: an ``IndexedDataset`` or any iterable."""
