"""The builder: every dataset split of a config, as megatron-core builds them.

* :mod:`tokenloom.builder.megatron`: :class:`BlendedMegatronDatasetBuilder`,
  megatron-core's split and blend logic (rank 0 builds, the other ranks load);
* :mod:`tokenloom.builder.startup`: the start-up shortcut that opens and keys a blend's
  prefixes from what is already known;
* :mod:`tokenloom.builder.memo`: the start-up memo file it reads and writes.
"""

from tokenloom.builder.megatron import BlendedMegatronDatasetBuilder, get_size_per_split_per_dataset

__all__ = ["BlendedMegatronDatasetBuilder", "get_size_per_split_per_dataset"]
