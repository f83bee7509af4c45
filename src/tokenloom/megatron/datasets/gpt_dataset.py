"""``megatron.core.datasets.gpt_dataset``: GPT datasets whose samples are torch tensors.

``GPTDataset`` and ``MockGPTDataset`` are tokenloom's (same indices, caches and
subclass hooks, see :mod:`tokenloom.datasets._hooks`), with megatron-core's sample
type: ``dataset[i]`` is a dict of torch tensors (:func:`tokenloom.megatron.tensors.to_torch`),
and errors are also ``AssertionError``s (:mod:`tokenloom.megatron.errors`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

import numpy

from tokenloom.datasets import config as _config
from tokenloom.datasets import gpt as _gpt
from tokenloom.datasets import mock as _mock
from tokenloom.datasets.masks import reference_ltor_masks_and_position_ids
from tokenloom.datasets.mock import MockGPTLowLevelDataset
from tokenloom.format import IndexedDataset
from tokenloom.megatron.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from tokenloom.megatron.datasets.megatron_dataset import MegatronDataset
from tokenloom.megatron.datasets.object_storage_utils import (
    ObjectStorageConfig,
    is_object_storage_path,
)
from tokenloom.megatron.datasets.utils import Split, log_single_rank
from tokenloom.megatron.errors import translate_errors
from tokenloom.megatron.pickling import StaysInstalled
from tokenloom.megatron.tensors import to_torch

__all__ = [
    "BlendedMegatronDatasetConfig",
    "GPTDataset",
    "GPTDatasetConfig",
    "IndexedDataset",
    "MegatronDataset",
    "MockGPTDataset",
    "MockGPTLowLevelDataset",
    "ObjectStorageConfig",
    "Split",
    "_get_ltor_masks_and_position_ids",
    "is_object_storage_path",
    "log_single_rank",
]

logger = logging.getLogger(__name__)

_TRANSLATED = ("__init__", "__getitem__", "__len__", "build_low_level_dataset")


@translate_errors("__post_init__")
@dataclass
class GPTDatasetConfig(_config.GPTDatasetConfig, BlendedMegatronDatasetConfig):
    """megatron-core's ``GPTDatasetConfig`` (tokenloom's fields and checks)."""


@translate_errors(*_TRANSLATED)
class GPTDataset(StaysInstalled, _gpt.GPTDataset):
    """megatron-core's ``GPTDataset``: tokenloom's, with torch tensor samples."""

    def __getitem__(self, idx: Optional[int]) -> dict[str, Any]:
        """One sample as megatron-core's dict of tensors (``None``: a padding sample)."""
        return to_torch(super().__getitem__(idx))


@translate_errors(*_TRANSLATED)
class MockGPTDataset(_mock.MockGPTDataset, GPTDataset):
    """megatron-core's ``MockGPTDataset``: tokenloom's, with torch tensor samples."""


def _get_ltor_masks_and_position_ids(
    data: Any,
    eod_token: int,
    reset_position_ids: bool,
    reset_attention_mask: bool,
    eod_mask_loss: bool,
    create_attention_mask: bool,
) -> tuple[Any, Any, Any]:
    """``(attention_mask or None, loss_mask, position_ids)`` of one sample's tokens, as
    torch tensors (megatron-core's function of the same name)."""
    import torch

    tokens = data.numpy() if isinstance(data, torch.Tensor) else numpy.asarray(data)
    attention, loss_mask, positions = reference_ltor_masks_and_position_ids(
        tokens,
        eod_token,
        reset_position_ids,
        reset_attention_mask,
        eod_mask_loss,
        create_attention_mask,
    )
    return (
        None if attention is None else torch.from_numpy(attention),
        torch.from_numpy(loss_mask),
        torch.from_numpy(positions),
    )


def __getattr__(name: str) -> Any:
    """``MegatronTokenizerBase`` (see blended_megatron_dataset_config)."""
    if name == "MegatronTokenizerBase":
        from tokenloom.megatron.datasets.megatron_tokenizer import tokenizer_base

        return tokenizer_base()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
