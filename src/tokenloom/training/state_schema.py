"""The shape and types of a loader state, checked whole before any field of it is used.

:func:`validate_state` walks every field of a state (nested ones included) against the
schema of its ``format`` and returns a plain copy (numpy integers become ints), or raises
one :class:`~tokenloom.errors.ConfigError` naming the first bad field by its path::

    loader state["dataset"]["length"] = 'x': must be an integer >= 0 (and < 2**63)

Missing and unknown fields are refused too. Nothing beyond the schema's depth is looked
at, and values are written into messages with a bounded ``repr``, so a state of any size,
type or nesting gives that error, never an ``AttributeError``, a ``RecursionError`` or a
``ValueError`` from formatting a huge integer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from tokenloom.errors import ConfigError
from tokenloom.training.checks import INT64_MAX, describe, is_integer

__all__ = [
    "OLD_STATE_FORMAT",
    "PRE_MIXTURE_FORMAT",
    "PRE_QUARANTINE_FORMAT",
    "STATE_FORMAT",
    "STATE_FORMATS",
    "validate_state",
]

STATE_FORMAT = "tokenloom.training.loader/4"
"""The format of the states :meth:`PretrainingDataLoader.state_dict` writes."""
PRE_MIXTURE_FORMAT = "tokenloom.training.loader/3"
"""States saved before the per-source counts (no ``sources``, no ``mixture``); they load
as serving the dataset as built (a mixture change from one is refused)."""
PRE_QUARANTINE_FORMAT = "tokenloom.training.loader/2"
"""States saved before the quarantine (no ``skip_batches``, no ``dataset.blocked_documents``);
they load as having skipped and blocked nothing."""
OLD_STATE_FORMAT = "tokenloom.training.loader/1"
"""States saved before the data identities were recorded (no ``dataset.files``)."""
STATE_FORMATS = (STATE_FORMAT, PRE_MIXTURE_FORMAT, PRE_QUARANTINE_FORMAT, OLD_STATE_FORMAT)
MAX_TEXT = 4096  # a path, class name or digest longer than PATH_MAX is not from a state

Path = tuple[Any, ...]
Check = Callable[[Path, Any], Any]


def _key(key: Any) -> str:
    return json.dumps(key) if isinstance(key, str) and len(key) <= MAX_TEXT else describe(key)


def where(path: Path) -> str:
    """``loader state["a"]["b"]``: the field at ``path``."""
    return "loader state" + "".join(f"[{_key(key)}]" for key in path)


def _bad(path: Path, value: Any, what: str) -> NoReturn:
    raise ConfigError(f"{where(path)} = {describe(value)}: must be {what}")


def _integer(minimum: int) -> Check:
    def check(path: Path, value: Any) -> int:
        if not is_integer(value) or not minimum <= value <= INT64_MAX:
            _bad(path, value, f"an integer >= {minimum} (and < 2**63)")
        return int(value)

    return check


def _flag(path: Path, value: Any) -> bool:
    if not isinstance(value, bool):
        _bad(path, value, "True or False")
    return value


def _text(path: Path, value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        _bad(path, value, f"a string (at most {MAX_TEXT} characters)")
    return value


def _choice(*choices: str) -> Check:
    def check(path: Path, value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            _bad(path, value, "one of " + ", ".join(repr(choice) for choice in choices))
        return value

    return check


def _optional(inner: Check) -> Check:
    def check(path: Path, value: Any) -> Any:
        return None if value is None else inner(path, value)

    return check


def _scalar(path: Path, value: Any) -> Any:
    """An identity value: an int64 integer (sizes, times), a string (digests, ETags) or None."""
    if value is None:
        return None
    if is_integer(value) and -INT64_MAX - 1 <= value <= INT64_MAX:
        return int(value)
    if isinstance(value, str) and len(value) <= MAX_TEXT:
        return value
    _bad(path, value, "an integer, a string or None (a field of a file identity)")


def _mapping_of(inner: Check, what: str) -> Check:
    def check(path: Path, value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            _bad(path, value, f"a dict of {what}")
        out = {}
        for key in value:
            if not isinstance(key, str) or len(key) > MAX_TEXT:
                raise ConfigError(f"{where(path)} has the key {describe(key)}: keys are strings")
            out[key] = inner((*path, key), value[key])
        return out

    return check


def _record(fields: dict[str, Check], later: tuple[str, ...] = ()) -> Check:
    """A dict of exactly ``fields``; a field in ``later`` (added in a later version of
    the format) may be missing and is then None."""
    names = ", ".join(fields)

    def check(path: Path, value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            _bad(path, value, f"a dict with the fields {names}")
        value = {**dict.fromkeys(later), **value}
        for name in fields:
            if name not in value:
                raise ConfigError(
                    f"{where((*path, name))} is missing: not a state saved by tokenloom's "
                    f"PretrainingDataLoader.state_dict() (its fields: {names})"
                )
        for key in value:
            if not isinstance(key, str) or key not in fields:
                raise ConfigError(
                    f"{where((*path, key))} is not a field of a loader state "
                    f"(its fields: {names}); was the state edited?"
                )
        return {
            name: check_field((*path, name), value[name]) for name, check_field in fields.items()
        }

    return check


def _skip_ranges(path: Path, value: Any) -> list[list[int]]:
    """``[[first, end], ...]``: skipped global steps, end exclusive."""
    if not isinstance(value, (list, tuple)) or len(value) > 1 << 20:
        _bad(path, value, "a list of [first, end] step ranges")
    out = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            _bad((*path, i), pair, "a [first, end] pair of step numbers")
        first, end = (_integer(0)((*path, i, j), pair[j]) for j in (0, 1))
        if first >= end:
            _bad((*path, i), pair, "a [first, end] pair with first < end")
        out.append([first, end])
    return out


_IDENTITY = _mapping_of(_mapping_of(_scalar, "identity fields"), "file parts ('idx', 'bin')")
_DATASET_V1: dict[str, Check] = {
    "class": _text,
    "length": _integer(0),
    "description_hash": _optional(_text),
}
_DATASET = dict(_DATASET_V1, files=_mapping_of(_IDENTITY, "file identities by path prefix"))
_COMMON: dict[str, Check] = {
    "dataloader_type": _choice("single", "cyclic", "elastic"),
    "sampler": _text,
    "consumed_samples": _integer(0),
    "pass_start_consumed": _integer(0),
    "pass_batches": _integer(0),
    "micro_batch_size": _integer(1),
    "global_batch_size": _optional(_integer(1)),
    "data_parallel_size": _integer(1),
    "data_parallel_rank": _integer(0),
    "data_sharding": _flag,
    "drop_last": _flag,
    "seed": _integer(0),
}


def _documents(path: Path, value: Any) -> list[int]:
    """``[first, end]``: a document range, ``first <= end``."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        _bad(path, value, "a [first, end] pair of document ids")
    first, end = (_integer(0)((*path, j), value[j]) for j in (0, 1))
    if first > end:
        _bad(path, value, "a [first, end] pair with first <= end")
    return [first, end]


_DATASET_V3 = dict(_DATASET, blocked_documents=_optional(_text))
_ORDER = _record(
    {
        "class": _text,
        "length": _integer(0),
        "num_samples": _optional(_integer(0)),
        "documents": _optional(_documents),
        "split": _optional(_text),
        "description_hash": _optional(_text),
        "path": _optional(_text),
    },
    later=("path",),
)
_SOURCE = _record(
    {"consumed": _optional(_integer(0)), "files": _optional(_IDENTITY), "order": _ORDER}
)
_MIXTURE = _record(
    {"resume_at": _integer(0), "start": _mapping_of(_integer(0), "counts by path prefix")}
)
_V3: dict[str, Check] = {
    "format": _text,
    **_COMMON,
    "skip_batches": _skip_ranges,
    "dataset": _record(_DATASET_V3),
}
_SCHEMAS: dict[str, Check] = {
    STATE_FORMAT: _record(
        {
            **_V3,
            "sources": _mapping_of(_SOURCE, "sources by path prefix"),
            "mixture": _optional(_MIXTURE),
        }
    ),
    PRE_MIXTURE_FORMAT: _record(_V3),
    PRE_QUARANTINE_FORMAT: _record({"format": _text, **_COMMON, "dataset": _record(_DATASET)}),
    OLD_STATE_FORMAT: _record({"format": _text, **_COMMON, "dataset": _record(_DATASET_V1)}),
}


def validate_state(state: Any) -> dict[str, Any]:
    """A plain, checked copy of ``state``, or ConfigError naming the first bad field."""
    if not isinstance(state, Mapping):
        raise ConfigError(
            f"loader state must be a dict saved by PretrainingDataLoader.state_dict(), "
            f"got {type(state).__name__} {describe(state)}"
        )
    if "format" not in state:
        raise ConfigError(
            'loader state["format"] is missing: not a state saved by tokenloom\'s '
            "PretrainingDataLoader.state_dict()"
        )
    kind = state["format"]
    if not isinstance(kind, str) or kind not in _SCHEMAS:
        _bad(
            ("format",),
            kind,
            f"{STATE_FORMAT!r} (or {PRE_MIXTURE_FORMAT!r}, {PRE_QUARANTINE_FORMAT!r}, "
            f"{OLD_STATE_FORMAT!r} from earlier tokenloom)",
        )
    checked: dict[str, Any] = _SCHEMAS[kind]((), state)
    checked.setdefault("skip_batches", [])  # earlier formats skipped and blocked nothing
    checked["dataset"].setdefault("blocked_documents", None)
    checked.setdefault("sources", None)  # before /4: no per-source counts
    checked.setdefault("mixture", None)
    if checked["data_parallel_rank"] >= checked["data_parallel_size"]:
        _bad(
            ("data_parallel_rank",),
            checked["data_parallel_rank"],
            f'smaller than loader state["data_parallel_size"] = {checked["data_parallel_size"]}',
        )
    return checked
