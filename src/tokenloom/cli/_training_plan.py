"""The training plan of ``prepare-cache``: Megatron-LM training's per-split sample targets.

``compute_plan(settings)`` gives the data-parallel size, the global batch size and the
train/valid/test sample counts exactly as Megatron-LM's training loop derives them
(``train_iters * global_batch_size`` ...); every integer setting is checked and a bad
one is a ConfigError naming it and the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.errors import ConfigError


@dataclass(frozen=True)
class Plan:
    """What the run looks like: parallelism, batch size and per-split sample targets."""

    world_size: int
    tensor: int
    pipeline: int
    context: int
    data_parallel_size: int
    global_batch_size: int
    sizes: list[Optional[int]]


def _int_setting(
    settings: dict[str, Any], key: str, default: Optional[int] = None, minimum: int = 0
) -> Optional[int]:
    value = settings.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")
    return value


def _int_or_default(settings: dict[str, Any], key: str, default: int, minimum: int = 0) -> int:
    """``_int_setting`` for a setting with a default (an explicit None also gives it)."""
    value = _int_setting(settings, key, default, minimum)
    return default if value is None else value


def compute_plan(settings: dict[str, Any]) -> Plan:
    """Data-parallel size, global batch size and the train/valid/test sample targets."""
    world = _int_or_default(settings, "world_size", 1, 1)
    tp, pp, cp = (
        _int_or_default(settings, f"{name}_parallel_size", 1, 1)
        for name in ("tensor_model", "pipeline_model", "context")
    )
    if world % (tp * pp * cp):
        raise ConfigError(
            f"world_size={world} is not divisible by tensor x pipeline x context "
            f"parallel sizes = {tp} x {pp} x {cp} = {tp * pp * cp}"
        )
    dp = world // (tp * pp * cp)
    gbs = _int_setting(settings, "global_batch_size", None, 1)
    if gbs is None:
        mbs = _int_setting(settings, "micro_batch_size", None, 1)
        if mbs is None:
            raise ConfigError(
                "give global_batch_size (or micro_batch_size, then the global batch "
                "size is micro_batch_size x data-parallel size)"
            )
        gbs = mbs * dp
    return Plan(world, tp, pp, cp, dp, gbs, _target_sizes(settings, gbs))


def _target_sizes(settings: dict[str, Any], gbs: int) -> list[Optional[int]]:
    train_iters = _int_setting(settings, "train_iters")
    train_samples = _int_setting(settings, "train_samples")
    eval_iters = _int_or_default(settings, "eval_iters", 0)
    eval_interval = _int_setting(settings, "eval_interval", None, 1)
    if not train_samples and train_iters is None:
        raise ConfigError("give train_iters (or train_samples) to size the train split")
    train = train_samples if train_samples or train_iters is None else train_iters * gbs
    if settings.get("full_validation"):
        valid = None
    else:
        if train_iters is None or eval_interval is None:
            raise ConfigError(
                "give train_iters and eval_interval to size the valid split "
                "(valid = (train_iters // eval_interval + 1) * eval_iters * gbs)"
            )
        valid = (train_iters // eval_interval + 1) * eval_iters * gbs
    return [train, valid, eval_iters * gbs]


__all__ = ["Plan", "compute_plan"]
