"""The loader's resume state: what it records and the checks that make a bad load loud.

A state is a plain dict of ints, strings, bools and dicts of them (it pickles and goes
into any checkpoint). :func:`check_state` validates a saved state's whole shape first
(:mod:`tokenloom.training.state_schema`), then compares it with a freshly built loader's
and raises :class:`~tokenloom.errors.ConfigError` naming the first field that differs,
or, for the data files, every pair whose identity changed
(:mod:`tokenloom.training.data_identity`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.training.checks import describe
from tokenloom.training.data_identity import data_changes, pair_identities, summarize
from tokenloom.training.samplers import RandomSeedDataset
from tokenloom.training.state_schema import OLD_STATE_FORMAT, STATE_FORMAT, validate_state

__all__ = ["STATE_FORMAT", "check_state", "dataset_fingerprint", "same_dataset"]

logger = logging.getLogger(__name__)

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
_OVERRIDE = "load_state_dict(state, allow_data_change=True)"


def dataset_fingerprint(dataset: Any) -> dict[str, Any]:
    """``{"class", "length", "description_hash", "files"}`` of a dataset.

    ``description_hash`` is Megatron's ``unique_description_hash`` (paths, split,
    blend weights, sequence length, seed, ...) when the dataset has one, else the MD5 of
    its ``unique_identifiers``, else None (then only the class and the length are
    compared). ``files`` is ``{path_prefix: identity}`` of every ``.bin``/``.idx`` pair
    the dataset reads (:func:`tokenloom.training.data_identity.pair_identities`).
    """
    target = dataset.dataset if isinstance(dataset, RandomSeedDataset) else dataset
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
        "files": pair_identities(dataset),
    }


_KEYS = ("class", "length", "description_hash")


def same_dataset(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two dataset fingerprints are of one dataset (mixture, split, sizes)."""
    return all(old[key] == new[key] for key in _KEYS)


def _check_dataset(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    for key in _KEYS:
        if old[key] != new[key]:
            raise ConfigError(
                f"loader state is from another dataset: dataset {key} was "
                f"{describe(old[key])}, this loader's is {describe(new[key])} (same files, "
                "blend, split, seed and num_samples are needed to resume; a deliberate "
                "change of the mixture loads with load_state_dict(state, "
                "allow_mixture_change=True))"
            )


def _check_files(saved: Mapping[str, Any], new: Mapping[str, Any], allow: bool) -> None:
    """ConfigError (or, with ``allow``, a warning) when the pairs' identities differ."""
    if saved["format"] == OLD_STATE_FORMAT:
        message = (
            f"loader state has format {OLD_STATE_FORMAT!r}: it was saved by an earlier "
            "tokenloom that did not record the identity of the data files, so it cannot "
            "tell whether the .bin/.idx pairs were regenerated or replaced since"
        )
        if not allow:
            raise ConfigError(
                f"{message}; if they are the files it was saved over, load it with {_OVERRIDE}"
            )
        logger.warning("%s; loaded anyway (allow_data_change=True)", message)
        return
    changes = data_changes(saved["dataset"]["files"], new["files"])
    if not changes:
        return
    message = (
        f"loader state was saved over other data files: {summarize(changes)}. The "
        ".bin/.idx pairs were regenerated, replaced or copied since the state was saved, "
        "so the same sample positions may hold other tokens"
    )
    if not allow:
        raise ConfigError(
            f"{message}. Resume over the files the state was saved with, start from "
            "consumed_samples without the state, or, if the change is deliberate (the same "
            f"tokens, or a planned swap), load it with {_OVERRIDE}"
        )
    logger.warning("%s; loaded anyway (allow_data_change=True)", message)


def check_state(
    saved: Any,
    current: Mapping[str, Any],
    elastic: bool,
    allow_data_change: bool = False,
    allow_mixture_change: bool = False,
) -> dict[str, Any]:
    """The checked copy of ``saved``, or ConfigError unless it can be loaded into a
    loader whose state is ``current``.

    ``allow_data_change`` accepts a state whose data files changed (or whose format
    predates the file identities), with a warning; everything else is still checked.
    ``allow_mixture_change`` accepts a state of another dataset (its per-source checks
    are :mod:`tokenloom.training.mixture_resume`'s) and, for the sequential sampler, of
    another data-parallel size (its global order does not depend on it).
    """
    state = validate_state(saved)
    changed = not same_dataset(state["dataset"], current["dataset"])
    if not (allow_mixture_change and changed):
        _check_dataset(state["dataset"], current["dataset"])
    for name in _SAME:
        if state[name] != current[name]:
            raise ConfigError(
                f"loader state has {name}={describe(state[name])} but this loader was "
                f"built with {name}={current[name]!r}; build it with the same arguments"
            )
    if not (elastic or (allow_mixture_change and current["dataloader_type"] == "single")):
        for name in ("data_parallel_size", "data_parallel_rank"):
            if state[name] != current[name]:
                raise ConfigError(
                    f"loader state has {name}={state[name]!r}, this loader {current[name]!r}: "
                    "only dataloader_type='elastic' resumes at another data-parallel layout"
                )
    if not (allow_mixture_change and changed):
        _check_files(state, current["dataset"], allow_data_change)
    return state
