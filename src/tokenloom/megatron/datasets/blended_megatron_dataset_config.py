"""``megatron.core.datasets.blended_megatron_dataset_config``: the builder's config.

:class:`BlendedMegatronDatasetConfig` is tokenloom's config (Megatron's fields, in
Megatron's order, each with its docstring and check) whose errors are also
``AssertionError``s, as megatron-core's asserts are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tokenloom.datasets import config as _config
from tokenloom.datasets.split import (
    Split,
    convert_split_vector_to_split_matrix,
    normalize,
    parse_and_normalize_split,
)
from tokenloom.megatron.datasets.utils import log_single_rank
from tokenloom.megatron.errors import translate_errors

__all__ = [
    "BlendedMegatronDatasetConfig",
    "MegatronTokenizerBase",  # noqa: F822 - module __getattr__
    "Split",
    "convert_split_vector_to_split_matrix",
    "log_single_rank",
    "normalize",
    "parse_and_normalize_split",
]

logger = logging.getLogger(__name__)


@translate_errors("__post_init__")
@dataclass
class BlendedMegatronDatasetConfig(_config.BlendedMegatronDatasetConfig):
    """megatron-core's ``BlendedMegatronDatasetConfig`` (see tokenloom's, which it is)."""


def __getattr__(name: str) -> Any:
    """``MegatronTokenizerBase``: megatron-core's, where it is installed (importing it
    loads ``megatron.core``), else tokenloom's legacy tokenizer base."""
    if name == "MegatronTokenizerBase":
        from tokenloom.megatron.datasets.megatron_tokenizer import tokenizer_base

        return tokenizer_base()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
