"""``tokenloom prepare-cache --mixture-change FILE``: the caches of a resume whose mixture
changed (the old run's train blend, which the continued split reads, next to the new
config's), and what the resume will do per source."""

from __future__ import annotations

from typing import Any

__all__ = ["describe_change", "prepare_change"]


def describe_change(path: str) -> Any:
    """Read and check the change file; print what it says (the dry run's part)."""
    from tokenloom.training.megatron_resume import read_mixture_change, with_consumed

    change = with_consumed(read_mixture_change(path), None)  # offline: no checkpoint
    print(
        f"mixture change:      {path} (the old run consumed {change.consumed_samples} of "
        f"its {change.old_train_samples} train samples)"
    )
    return change


def prepare_change(path: str, config: Any, new_train: Any) -> Any:
    """Build the old run's train blend (its caches) and the continued train split; print
    one line per source and the continued split's size. Returns the continued split."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset
    from tokenloom.errors import ConfigError
    from tokenloom.training.megatron_resume import continue_train, old_config

    change = describe_change(path)
    sizes = [change.old_train_samples, 0, 0]
    old = BlendedMegatronDatasetBuilder(
        GPTDataset, sizes, lambda: True, old_config(change, config)
    ).build()[0]
    if old is None:  # built on every rank here (lambda: True)
        raise ConfigError(f"mixture change {path}: the old train split is empty")
    continued = continue_train(change, old, new_train, config)
    print(f"old train:           {len(old)} samples")
    for line in continued.changes:
        print(f"  {line}")
    print(
        f"continued train:     {len(continued)} samples (the first {change.consumed_samples} "
        f"the old blend's, then {len(continued.mixture)} of the new mixture)"
    )
    return continued
