"""Which batch sampler ``build_pretraining_data_loader`` builds, without torch.

:func:`make_sampler` is the loader's own choice of sampler (the loader calls it for
every pass); :func:`build_batch_sampler` is what
``build_pretraining_data_loader(...).batch_sampler`` is, from the same arguments and
the same checks, without building the loader (so without importing torch): ``tokenloom
trace`` takes the run's order from it. A ``permutations`` memo shared by the samplers of
all ranks draws each pass's permutation once instead of once per rank (the samplers of
one pass ask for the same ``randperm``; the memo is keyed by its size and seed).
"""

from __future__ import annotations

from typing import Any, Optional

from tokenloom.errors import ConfigError
from tokenloom.training.options import check_dataloader_type, resolve_options
from tokenloom.training.quarantine import normalize_skip_batches
from tokenloom.training.samplers import (
    ElasticPretrainingSampler,
    HybridCPMegatronPretrainingSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    PermutationMemo,
)

__all__ = ["build_batch_sampler", "loader_options", "make_sampler", "resolved_options"]


def loader_options(
    dataloader_type: str,
    micro_batch_size: int,
    global_batch_size: Optional[int],
    data_parallel_rank: int,
    data_parallel_size: int,
    data_sharding: bool,
    drop_last: bool,
    seed: int,
    hybrid_context_parallel: bool,
    skip_batches: Any,
) -> dict[str, Any]:
    """The loader's ``options`` dict (unchecked: :func:`resolve_options` checks it)."""
    return {
        "dataloader_type": dataloader_type,
        "micro_batch_size": micro_batch_size,
        "global_batch_size": global_batch_size,
        "data_parallel_rank": data_parallel_rank,
        "data_parallel_size": data_parallel_size,
        "data_sharding": data_sharding,
        "drop_last": drop_last,
        "seed": seed,
        "hybrid_context_parallel": hybrid_context_parallel,
        "skip_batches": normalize_skip_batches(skip_batches),
    }


def resolved_options(
    dataset: Any, consumed_samples: int, full_validation: bool, **sampler_args: Any
) -> tuple[dict[str, Any], int]:
    """The checked loader ``options`` of ``sampler_args`` (:func:`loader_options`'s
    names) and the ``consumed_samples`` the pass starts at: the one option resolution
    of both ``build_pretraining_data_loader`` and :func:`build_batch_sampler`."""
    options = loader_options(**sampler_args)
    consumed = resolve_options(dataset, options, consumed_samples, full_validation)
    return options, consumed


def make_sampler(
    dataset: Any,
    options: dict[str, Any],
    consumed: int,
    permutations: Optional[PermutationMemo] = None,
) -> Any:
    """The batch sampler of checked loader ``options`` whose pass starts at ``consumed``."""
    o, total = options, len(dataset)
    ranks = {
        "data_parallel_rank": o["data_parallel_rank"],
        "data_parallel_size": o["data_parallel_size"],
    }
    kind = o["dataloader_type"]
    if kind == "single" and o["hybrid_context_parallel"]:
        return HybridCPMegatronPretrainingSampler(
            total,
            consumed,
            o["micro_batch_size"],
            o["global_batch_size"],
            **ranks,
            drop_last=o["drop_last"],
        )
    if kind == "single":
        return MegatronPretrainingSampler(
            total, consumed, o["micro_batch_size"], **ranks, drop_last=o["drop_last"]
        )
    if kind == "cyclic":
        sampler: Any = MegatronPretrainingRandomSampler(
            dataset,
            total,
            consumed,
            o["micro_batch_size"],
            **ranks,
            data_sharding=o["data_sharding"],
        )
    elif o["global_batch_size"] is None:
        raise ConfigError(
            "dataloader_type='elastic' needs global_batch_size (the unit "
            "whose contents stay fixed when data_parallel_size changes)"
        )
    else:
        sampler = ElasticPretrainingSampler(
            total, consumed, o["micro_batch_size"], o["global_batch_size"], **ranks, seed=o["seed"]
        )
    if permutations is not None:
        sampler.permutations = permutations
    return sampler


def build_batch_sampler(
    dataset: Any,
    consumed_samples: int,
    *,
    dataloader_type: str = "single",
    micro_batch_size: int,
    data_parallel_rank: int = 0,
    data_parallel_size: int = 1,
    data_sharding: bool = True,
    global_batch_size: Optional[int] = None,
    hybrid_context_parallel: bool = False,
    full_validation: bool = False,
    drop_last: bool = True,
    seed: int = 0,
    permutations: Optional[PermutationMemo] = None,
) -> Any:
    """``build_pretraining_data_loader(dataset, consumed_samples, ...).batch_sampler``
    for the same sampler arguments (checked the same way), without the loader."""
    check_dataloader_type(dataloader_type)
    if dataloader_type == "external":
        raise ConfigError("dataloader_type='external' has no batch sampler")
    options, consumed = resolved_options(
        dataset,
        consumed_samples,
        full_validation,
        dataloader_type=dataloader_type,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        data_parallel_rank=data_parallel_rank,
        data_parallel_size=data_parallel_size,
        data_sharding=data_sharding,
        drop_last=drop_last,
        seed=seed,
        hybrid_context_parallel=hybrid_context_parallel,
        skip_batches=None,
    )
    return make_sampler(dataset, options, consumed, permutations)
