"""Megatron-compatible datasets: configs, splits, GPT and mock GPT datasets.

``from tokenloom.datasets import GPTDatasetConfig, GPTDataset, MockGPTDataset, Split``
"""

from __future__ import annotations

import importlib
from typing import Any

from tokenloom.datasets.config import (
    BlendedMegatronDatasetConfig,
    GPTDatasetConfig,
    SimpleTokenizer,
)
from tokenloom.datasets.split import (
    Split,
    convert_split_vector_to_split_matrix,
    normalize,
    parse_and_normalize_split,
    split_document_range,
)
from tokenloom.datasets.utils import (
    get_blend_from_list,
    get_blend_per_split_from_dict,
    get_blend_per_split_from_file,
    load_sequences_per_dataset,
)

_LAZY = {
    "MegatronDataset": "tokenloom.datasets.megatron_dataset",
    "GPTDataset": "tokenloom.datasets.gpt",
    "MockGPTDataset": "tokenloom.datasets.mock",
    "MockGPTLowLevelDataset": "tokenloom.datasets.mock",
    "BlendedDataset": "tokenloom.datasets.blended",
}

__all__ = [
    "BlendedMegatronDatasetConfig",
    "GPTDatasetConfig",
    "SimpleTokenizer",
    "Split",
    "convert_split_vector_to_split_matrix",
    "normalize",
    "parse_and_normalize_split",
    "split_document_range",
    "get_blend_from_list",
    "get_blend_per_split_from_dict",
    "get_blend_per_split_from_file",
    "load_sequences_per_dataset",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    """Import the dataset classes on first use (they pull in the index kernels)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tokenloom.datasets' has no attribute {name!r}")
