"""Resume a Megatron-style run with a changed mixture (issue 20 §1, the builder side).

A *mixture change file* (JSON, or YAML with PyYAML) says what the saved run was and how
far it got::

    {"allow_mixture_change": true,
     "consumed_samples": 38400,                 # or "state": "loader_state.json"
     "old": {"data_path": ["0.5", "data/web", "0.5", "data/code"],
             "split": "98,2,0", "seed": 1234, "seq_length": 4096,
             "train_samples": 1024000}}         # the old run's train target

:func:`read_mixture_change` checks it whole (a :class:`~tokenloom.errors.ConfigError`
names the file, the field and the value). :func:`old_config` is the new config with the
old run's data fields put back, so the builder rebuilds the old train blend (its caches
are the old run's, so it is a warm load). :func:`continue_train` then gives the train
split that Megatron's sequential (``"single"``) sampler, which skips the first
``consumed_samples`` samples, reads as the continued mixture: :class:`ContinuedTrainSplit`,
whose samples before ``consumed_samples`` are the old blend's and whose samples from
there on are :class:`~tokenloom.training.mixture.ContinuedMixture`'s under the new
config's weights. The compat layer (``TOKENLOOM_MIXTURE_CHANGE``) and ``tokenloom
prepare-cache --mixture-change`` use it; docs/mixtures.md has the rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.training.checks import describe, is_integer
from tokenloom.training.continued_split import ContinuedTrainSplit
from tokenloom.training.data_identity import pair_identities
from tokenloom.training.mixture import (
    ContinuedMixture,
    mixture_changes,
    old_sources,
    source_consumed,
)
from tokenloom.training.saved_run import check_counts, check_state, saved_dataset

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "ContinuedTrainSplit",
    "MixtureChange",
    "continue_train",
    "old_config",
    "parse_mixture_change",
    "read_mixture_change",
    "with_consumed",
]

ENVIRONMENT_VARIABLE = "TOKENLOOM_MIXTURE_CHANGE"
"""Names a mixture change file for the compat layer's builder (docs/mixtures.md)."""

_OLD_ALIASES = {
    "data_path": "blend",
    "seed": "random_seed",
    "seq_length": "sequence_length",
}
_OLD_FIELDS = (
    "blend",
    "split",
    "random_seed",
    "sequence_length",
    "mid_level_dataset_surplus",
    "blend_schedule",
)
_OLD_SIZES = ("train_samples", "train_iters", "global_batch_size")
_TOP = ("allow_mixture_change", "allow_data_change", "consumed_samples", "state", "old")


@dataclasses.dataclass(frozen=True)
class MixtureChange:
    """A checked mixture change file: see the module docstring."""

    source: str
    """Where it came from (a path), for messages."""
    consumed_samples: Optional[int]
    """Global samples the saved run consumed (Megatron's ``consumed_train_samples``);
    None for ``"checkpoint"``: :func:`with_consumed` gives it from the resumed checkpoint."""
    old_fields: dict[str, Any]
    """The old run's data fields, by ``GPTDatasetConfig`` name."""
    old_train_samples: int
    """The old run's train target (``train_iters * global_batch_size``)."""
    state_dataset: Optional[dict[str, Any]] = None
    """``state["dataset"]`` of a loader state file, checked against the old blend."""
    allow_data_change: bool = False
    """Continue although the state's data files changed (their identities differ)."""


def _bad(source: str, field: str, value: Any, what: str) -> ConfigError:
    return ConfigError(f"mixture change {source}: {field}={describe(value)}: {what}")


def _count(source: str, field: str, value: Any, minimum: int) -> int:
    if not is_integer(value) or value < minimum:
        raise _bad(source, field, value, f"must be an integer >= {minimum}")
    return int(value)


def _old_fields(source: str, old: Any) -> tuple[dict[str, Any], int]:
    from tokenloom.datasets.utils import get_blend_from_list

    if not isinstance(old, Mapping):
        raise _bad(source, "old", old, "must be a mapping of the old run's data settings")
    fields: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for raw, value in old.items():
        key = str(raw).replace("-", "_")
        key = _OLD_ALIASES.get(key, key)
        if key in _OLD_SIZES:
            sizes[key] = _count(source, f"old.{raw}", value, 1)
        elif key in _OLD_FIELDS:
            fields[key] = value
        else:
            known = ", ".join(sorted({*_OLD_FIELDS, *_OLD_SIZES, *_OLD_ALIASES}))
            raise _bad(source, f"old.{raw}", value, f"unknown setting (known: {known})")
    blend = fields.get("blend")
    if blend is None:
        raise _bad(source, "old.blend", None, "give the old run's data_path (or blend)")
    if isinstance(blend, str) or (isinstance(blend, list) and blend and isinstance(blend[0], str)):
        fields["blend"] = get_blend_from_list(blend.split() if isinstance(blend, str) else blend)
    elif isinstance(blend, (list, tuple)) and len(blend) == 2:
        fields["blend"] = (list(blend[0]), None if blend[1] is None else list(blend[1]))
    else:
        raise _bad(source, "old.blend", blend, "a data_path list or [prefixes, weights]")
    if "train_samples" in sizes:
        return fields, sizes["train_samples"]
    if "train_iters" in sizes and "global_batch_size" in sizes:
        return fields, sizes["train_iters"] * sizes["global_batch_size"]
    raise _bad(source, "old.train_samples", None, "give it, or train_iters and global_batch_size")


def parse_mixture_change(
    data: Any, source: str, state: Optional[Mapping[str, Any]] = None
) -> MixtureChange:
    """A :class:`MixtureChange` from the mapping of a change file (``state``: the loader
    state its ``"state"`` field names, already read)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"mixture change {source}: expected a mapping of settings")
    for key in data:
        if key not in _TOP:
            raise _bad(source, str(key), data[key], f"unknown setting (known: {', '.join(_TOP)})")
    allow = data.get("allow_mixture_change")
    if allow is not True:
        raise _bad(
            source,
            "allow_mixture_change",
            allow,
            "a resume with a changed mixture is refused by default; set it to true to "
            "opt in (each source then continues from its next unconsumed sample)",
        )
    if ("consumed_samples" in data) == (state is not None):
        raise _bad(
            source,
            "consumed_samples",
            data.get("consumed_samples"),
            "give exactly one of consumed_samples and state",
        )
    dataset, consumed = None, None  # type: tuple[Optional[dict[str, Any]], Optional[int]]
    if state is not None:
        consumed, dataset = _from_state(source, state)
    else:
        given = data["consumed_samples"]
        consumed = None if given == "checkpoint" else _count(source, "consumed_samples", given, 0)
    fields, train = _old_fields(source, data.get("old"))
    data_change = data.get("allow_data_change", False)
    if not isinstance(data_change, bool):
        raise _bad(source, "allow_data_change", data_change, "must be true or false")
    return MixtureChange(source, consumed, fields, train, dataset, data_change)


def _from_state(source: str, state: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    from tokenloom.training.state_schema import validate_state

    checked = validate_state(state)
    if checked["dataloader_type"] != "single":
        raise _bad(
            source,
            "state.dataloader_type",
            checked["dataloader_type"],
            "a mixture change continues Megatron's sequential ('single') sampler only",
        )
    if checked["mixture"] is not None:
        raise _bad(
            source,
            "state.mixture",
            checked["mixture"],
            "the saved run was itself continued after a mixture change, so the old "
            "config's blend is not what it served; continue it with tokenloom's loader "
            "(load_state_dict(state, allow_mixture_change=True))",
        )
    counts = {p: s["consumed"] for p, s in (checked["sources"] or {}).items()}
    return int(checked["consumed_samples"]), dict(checked["dataset"], source_counts=counts)


def read_mixture_change(path: str) -> MixtureChange:
    """Read and check a mixture change file (and the loader state it names)."""
    data = _read_mapping(path, "mixture change file")
    state = None
    if isinstance(data, Mapping) and "state" in data:
        name = data["state"]
        if not isinstance(name, str) or not name:
            raise _bad(path, "state", name, "must be the path of a saved loader state")
        state = _read_mapping(name, "loader state file", allow_torch=True)
    return parse_mixture_change(data, path, state)


def _read_mapping(path: str, what: str, allow_torch: bool = False) -> Any:
    from tokenloom.untrusted_json import loads_json, read_bounded

    try:
        raw = read_bounded(path, what=what)
        if path.endswith((".yaml", ".yml")):
            import yaml

            return yaml.safe_load(raw.decode("utf-8"))
        if allow_torch and raw.lstrip()[:1] != b"{":
            import io

            import torch

            return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        return loads_json(raw, source=path, what=what)
    except ConfigError:
        raise
    except OSError as error:
        raise ConfigError(f"{what} {path}: cannot read it ({error})") from None
    except Exception as error:  # YAML's, torch's and the JSON reader's many kinds
        raise ConfigError(f"{what} {path}: cannot parse it ({error})") from None


def with_consumed(change: MixtureChange, checkpoint: Optional[int]) -> MixtureChange:
    """``change`` with the consumed count of the checkpoint the run resumed from
    (Megatron's ``args.consumed_train_samples``; None where no such args exist): it fills
    ``"checkpoint"``, and a number given in the file must equal it."""
    if checkpoint is None:
        if change.consumed_samples is None:
            raise _bad(
                change.source,
                "consumed_samples",
                "checkpoint",
                "needs Megatron-LM's training args (megatron.training.get_args()) of a "
                "resumed run; none in this process, so give the number",
            )
        return change
    if change.consumed_samples is not None and change.consumed_samples != checkpoint:
        raise _bad(
            change.source,
            "consumed_samples",
            change.consumed_samples,
            f"the checkpoint this run resumed from consumed {checkpoint} samples "
            "(args.consumed_train_samples); the file is not this resume's",
        )
    return dataclasses.replace(change, consumed_samples=int(checkpoint))


def old_config(change: MixtureChange, config: Any) -> Any:
    """``config`` with the old run's data fields (no per-split blends, no cap)."""
    names = {f.name for f in dataclasses.fields(config)}
    fields = {k: v for k, v in change.old_fields.items() if k in names}
    defaults = {"blend_per_split": None, "blend_schedule": None, "max_epochs_per_source": None}
    given = {k: v for k, v in defaults.items() if k in names}
    return dataclasses.replace(config, **{**given, **fields})


def _new_weights(config: Any, source: str) -> dict[str, float]:
    blend = read_attribute(config, "blend", None)
    if not blend:
        raise ConfigError(
            f"mixture change {source}: the new config has no blend (data_path); "
            "per-split blends cannot be continued"
        )
    prefixes, weights = blend
    if weights is None and len(prefixes) > 1:
        raise ConfigError(f"mixture change {source}: the new blend {prefixes} needs weights")
    weights = [1.0] if weights is None else weights
    if len(set(prefixes)) != len(prefixes):
        raise ConfigError(f"mixture change {source}: the new blend repeats a prefix: {prefixes}")
    return {p: float(w) for p, w in zip(prefixes, weights)}


def _sources(dataset: Any) -> dict[str, Any]:
    if read_attribute(dataset, "dataset_index", None) is not None:
        return old_sources(dataset)
    return {prefix: dataset for prefix in pair_identities(dataset)}


def continue_train(change: MixtureChange, old: Any, new: Any, config: Any) -> ContinuedTrainSplit:
    """The train split after ``change``: ``old`` is the old config's train split,
    ``new`` the new config's (its added sources are used from their first sample)."""
    saved = saved_dataset(change.state_dataset, old, change.source)
    check_state(change.source, saved, old, change.allow_data_change)
    weights = _new_weights(config, change.source)
    consumed = change.consumed_samples
    if consumed is None:
        change = with_consumed(change, None)  # raises: "checkpoint" not resolved
        consumed = 0
    if consumed > len(old):
        raise _bad(
            change.source,
            "consumed_samples",
            consumed,
            f"past the old train blend's {len(old)} samples (old.train_samples is not the "
            "saved run's?)",
        )
    if consumed > len(new):
        raise _bad(
            change.source,
            "consumed_samples",
            consumed,
            f"past the new train split's {len(new)} samples: the new run ends before it",
        )
    sources = _sources(old)
    index = read_attribute(old, "dataset_index", None)
    if index is None:
        index = numpy.zeros(len(old), numpy.int16)
    counts = source_consumed(index, consumed, list(sources))
    check_counts(change.source, saved, counts)
    added = {p: d for p, d in _sources(new).items() if p in weights and p not in sources}
    schedule = read_attribute(config, "blend_schedule", None)
    mixture = ContinuedMixture(
        {**added, **sources}, counts, weights, len(new) - consumed, schedule, consumed
    )
    return ContinuedTrainSplit(old, consumed, mixture, mixture_changes(counts, weights))
