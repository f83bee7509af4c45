"""tokenloom: Megatron-compatible LLM data pipeline without Megatron.

The names below follow megatron-core, so migrating is a change of imports::

    from tokenloom import BlendedMegatronDatasetBuilder, GPTDatasetConfig, GPTDataset

Importing tokenloom needs only numpy; torch, numba and tokenizers are imported where
they are used.
"""

__version__ = "0.1.0"

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.datasets.config import BlendedMegatronDatasetConfig, GPTDatasetConfig
from tokenloom.datasets.gpt import GPTDataset
from tokenloom.datasets.mock import MockGPTDataset
from tokenloom.datasets.split import Split
from tokenloom.errors import (
    CacheError,
    ConfigError,
    DistributedError,
    FormatError,
    PreprocessError,
    TokenizerError,
    TokenloomError,
)
from tokenloom.format import DType, IndexedDataset, IndexedDatasetBuilder, optimal_dtype

__all__ = [
    "__version__",
    # format
    "DType",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "optimal_dtype",
    # datasets
    "BlendedDataset",
    "BlendedMegatronDatasetBuilder",
    "BlendedMegatronDatasetConfig",
    "GPTDataset",
    "GPTDatasetConfig",
    "MockGPTDataset",
    "Split",
    # errors
    "CacheError",
    "ConfigError",
    "DistributedError",
    "FormatError",
    "PreprocessError",
    "TokenizerError",
    "TokenloomError",
]
