"""tokenloom: Megatron-compatible LLM data pipeline without Megatron.

The data path, one package per numbered step (docs/architecture.md; a README in each
package's folder lists its modules)::

    text (JSONL, Parquet, HF datasets)
      |  1 preprocess   tokenize, write Megatron's bytes (one machine, a pool, or Ray)
      v
    PREFIX.bin / PREFIX.idx  (+ PREFIX.json provenance)
      |  2 format       IndexedDataset: mmap, file reads, s3:// and msc://
      v
    sequences and documents
      |  3 index        document, sample, shuffle, blending indices (kernels + reference)
      |  4 cache        content-addressed, validated, atomic index caches
      v
    GPTDataset / BlendedDataset      5 datasets: megatron-core's samples, dataset[i]
      |  6 builder      every split of a config; rank 0 builds or all ranks build shares
      v
    samplers -> DataLoader -> batch  7 training: exact and elastic resume, mixture
      |                                changes, quarantine
      v  7 packing      DP x CP sequence packing, THD batches
    the training step

The names below follow megatron-core, so migrating is a change of imports::

    from tokenloom import BlendedMegatronDatasetBuilder, GPTDatasetConfig, GPTDataset

Importing tokenloom loads nothing else: each name below is imported at its first use
(PEP 562), so ``import tokenloom.format`` does not load the builder, the datasets or
object storage.  torch, numba and tokenizers are imported where they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tokenloom._version import __version__

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports these
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

#: ``(module, names it defines)`` of every exported name, imported at first access
_EXPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tokenloom.format", ("DType", "IndexedDataset", "IndexedDatasetBuilder", "optimal_dtype")),
    ("tokenloom.datasets.blended", ("BlendedDataset",)),
    ("tokenloom.builder", ("BlendedMegatronDatasetBuilder",)),
    ("tokenloom.datasets.config", ("BlendedMegatronDatasetConfig", "GPTDatasetConfig")),
    ("tokenloom.datasets.gpt", ("GPTDataset",)),
    ("tokenloom.datasets.mock", ("MockGPTDataset",)),
    ("tokenloom.datasets.split", ("Split",)),
    (
        "tokenloom.errors",
        (
            "CacheError",
            "ConfigError",
            "DistributedError",
            "FormatError",
            "PreprocessError",
            "TokenizerError",
            "TokenloomError",
        ),
    ),
)

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


def __getattr__(name: str) -> Any:
    """The exported ``name``, imported from its module (a no-op after the first time:
    the module is then in ``sys.modules``)."""
    for module, names in _EXPORTS:
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'tokenloom' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The exported names and the submodules already imported."""
    return sorted(set(globals()) | set(__all__))
