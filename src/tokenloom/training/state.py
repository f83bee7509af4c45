"""The loader's resume state: what it records and the checks that make a bad load loud.

A state is a plain dict of ints, strings and bools (it pickles and goes into any
checkpoint).  :func:`check_state` compares a saved state with a freshly built loader's
and raises :class:`~tokenloom.errors.ConfigError` naming the first field that differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

__all__ = ["STATE_FORMAT", "check_state", "dataset_fingerprint"]

STATE_FORMAT = "tokenloom.training.loader/1"
# fields that must match between the saved and the new loader; data_parallel_size and
# data_parallel_rank are checked separately (the elastic kind may change them)
_SAME = (
    "dataloader_type",
    "sampler",
    "micro_batch_size",
    "global_batch_size",
    "data_sharding",
    "drop_last",
    "seed",
)


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """``{"class", "length", "description_hash"}`` of a dataset.

    ``description_hash`` is Megatron's ``unique_description_hash`` (paths, split,
    blend weights, sequence length, seed, ...) when the dataset has one, else the MD5 of
    its ``cache_identifiers`` / ``unique_identifiers``, else None (then only the class and
    the length are compared).
    """
    inner = (
        read_attribute(dataset, "dataset", None)
        if type(dataset).__name__ == "RandomSeedDataset"
        else None
    )
    target = inner if inner is not None else dataset
    digest = read_attribute(target, "unique_description_hash", None)
    if digest is None:
        identifiers = read_attribute(target, "unique_identifiers", None)
        if identifiers is not None:
            text = json.dumps(identifiers, sort_keys=True, default=str)
            digest = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
    return {
        "class": type(target).__name__,
        "length": len(dataset),
        "description_hash": None if digest is None else str(digest),
    }


def _field(state: Mapping[str, Any], name: str) -> Any:
    if name not in state:
        raise ConfigError(
            f"loader state has no field {name!r}: not a state saved by "
            "tokenloom's PretrainingDataLoader.state_dict()"
        )
    return state[name]


def check_state(saved: Mapping[str, Any], current: Mapping[str, Any], elastic: bool) -> None:
    """Raise ConfigError unless ``saved`` can be loaded into a loader whose state is ``current``."""
    if not isinstance(saved, Mapping):
        raise ConfigError(f"loader state must be a dict, got {type(saved).__name__}")
    if _field(saved, "format") != STATE_FORMAT:
        raise ConfigError(f"loader state format {saved['format']!r} is not {STATE_FORMAT!r}")
    old, new = _field(saved, "dataset"), current["dataset"]
    for key in ("class", "length", "description_hash"):
        if old.get(key) != new.get(key):
            raise ConfigError(
                f"loader state is from another dataset: dataset {key} was {old.get(key)!r}, "
                f"this loader's is {new.get(key)!r} (same files, blend, split, seed and "
                "num_samples are needed to resume)"
            )
    for name in _SAME:
        if _field(saved, name) != current[name]:
            raise ConfigError(
                f"loader state has {name}={saved[name]!r} but this loader was "
                f"built with {name}={current[name]!r}; build it with the same "
                "arguments"
            )
    if not elastic:
        for name in ("data_parallel_size", "data_parallel_rank"):
            if _field(saved, name) != current[name]:
                raise ConfigError(
                    f"loader state has {name}={saved[name]!r}, this loader {current[name]!r}: "
                    f"only dataloader_type='elastic' resumes at another data-parallel layout"
                )
    consumed = _field(saved, "consumed_samples")
    if not isinstance(consumed, int) or consumed < 0:
        raise ConfigError(f"loader state consumed_samples must be an int >= 0, got {consumed!r}")
