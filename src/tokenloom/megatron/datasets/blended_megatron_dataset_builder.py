"""``megatron.core.datasets.blended_megatron_dataset_builder``: every split of a config.

tokenloom's builder (rank 0 builds, the other ranks load; same splits, blends and sizes
as megatron-core), building the compat layer's ``BlendedDataset`` and
``MockGPTDataset``, with errors that are also ``AssertionError``s.

With ``TOKENLOOM_MIXTURE_CHANGE=FILE`` (a mixture change file, opt-in inside it:
docs/mixtures.md) the train split continues a saved run under the config's new blend
weights: :func:`tokenloom.training.megatron_resume.continue_train`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional, Union

from tokenloom.attributes import read_attribute
from tokenloom.builder import megatron as _builder
from tokenloom.datasets import gpt as _gpt
from tokenloom.errors import ConfigError
from tokenloom.megatron.datasets.blended_dataset import BlendedDataset
from tokenloom.megatron.datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from tokenloom.megatron.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from tokenloom.megatron.datasets.megatron_dataset import LowLevelDataset, MegatronDataset
from tokenloom.megatron.datasets.utils import Split, log_single_rank, normalize
from tokenloom.megatron.errors import translate_errors
from tokenloom.training.megatron_resume import (
    ENVIRONMENT_VARIABLE,
    continue_train,
    old_config,
    read_mixture_change,
    with_consumed,
)

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


def _checkpoint_consumed() -> Optional[int]:
    """``args.consumed_train_samples`` of a Megatron-LM training run (set from the
    checkpoint before its datasets are built), or None outside one; ConfigError when the
    run's sampler is not the sequential one."""
    try:
        from megatron.training import get_args  # Megatron-LM's, not megatron-core's

        args = get_args()
    except (ImportError, AssertionError, AttributeError):  # no such package / no args yet
        return None
    sampler = read_attribute(args, "dataloader_type", None)
    if sampler not in (None, "single"):
        raise ConfigError(
            f"{ENVIRONMENT_VARIABLE}: --dataloader-type {sampler!r}: a mixture change "
            "continues Megatron's sequential ('single') sampler only (a random sampler's "
            "consumed samples are no prefix of each source)"
        )
    value = read_attribute(args, "consumed_train_samples", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class _Builder(_builder.BlendedMegatronDatasetBuilder):
    """tokenloom's builder making the compat classes (no mixture change)."""

    blended_dataset_class = BlendedDataset
    mock_substitutes = ((GPTDataset, MockGPTDataset), (_gpt.GPTDataset, MockGPTDataset))


@translate_errors("__init__", "build", "build_generic_dataset")
class BlendedMegatronDatasetBuilder(_Builder):
    """megatron-core's ``BlendedMegatronDatasetBuilder`` (tokenloom's, see its docstring).

    Where ``TOKENLOOM_MIXTURE_CHANGE`` names a mixture change file, :meth:`build` also
    rebuilds the old run's train blend (on every rank, as any build) and returns the
    continued train split (:class:`~tokenloom.training.megatron_resume.ContinuedTrainSplit`);
    valid and test are the new config's.
    """

    def build(self) -> list[Optional[Any]]:
        """Every split, the train split continued after a mixture change if one is set."""
        datasets = super().build()
        path = os.environ.get(ENVIRONMENT_VARIABLE)
        if not path:
            return datasets
        change = with_consumed(read_mixture_change(path), _checkpoint_consumed())
        log_single_rank(
            logger,
            logging.WARNING,
            f"{ENVIRONMENT_VARIABLE}={path}: the train split continues a run that consumed "
            f"{change.consumed_samples} samples of another mixture",
        )
        old = _Builder(
            self.cls,
            [change.old_train_samples, 0, 0],
            self.is_built_on_rank,
            old_config(change, self.config),
            comm=self.comm,
        ).build()[0]
        if datasets[0] is None or old is None:  # not built on this rank
            return datasets
        return [continue_train(change, old, datasets[0], self.config), *datasets[1:]]
