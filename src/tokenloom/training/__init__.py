"""The training side: Megatron's samplers and data loader, exact and elastic resume.

``from tokenloom.training import build_pretraining_data_loader`` (needs torch for the
loader; the samplers, :func:`build_batch_sampler` and :func:`randperm` need only numpy).
"""

from __future__ import annotations

import importlib
from typing import Any

from tokenloom.training.permutation import SMALL_N_LIMIT, randperm, reference_randperm
from tokenloom.training.sampler_choice import build_batch_sampler
from tokenloom.training.samplers import (
    ElasticPretrainingSampler,
    HybridCPMegatronPretrainingSampler,
    MegatronFullValidationSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    PermutationMemo,
    RandomSeedDataset,
)

_LAZY = {
    "PretrainingDataLoader": "tokenloom.training.loader",
    "build_pretraining_data_loader": "tokenloom.training.loader",
    "cyclic_iter": "tokenloom.training.loader",
    "collate_batch": "tokenloom.training.collate",
    "dataset_fingerprint": "tokenloom.training.state",
}

__all__ = [
    "SMALL_N_LIMIT",
    "ElasticPretrainingSampler",
    "HybridCPMegatronPretrainingSampler",
    "MegatronFullValidationSampler",
    "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler",
    "PermutationMemo",
    "RandomSeedDataset",
    "build_batch_sampler",
    "randperm",
    "reference_randperm",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    """Import the torch-side parts on first use (importing torch costs ~1.5 s)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tokenloom.training' has no attribute {name!r}")
