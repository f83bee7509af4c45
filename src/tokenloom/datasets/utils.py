"""Blend parsing and small helpers shared by the dataset configs.

* :func:`get_blend_from_list` turns a Megatron ``--data-path`` style list
  (``["30", "p1", "70", "p2"]`` or bare prefixes) into a ``blend`` pair.
* :func:`get_blend_per_split_from_file` reads a ``--per-split-data-args-path`` JSON
  file (``{"train": [...], "valid": [...], "test": [...]}``) into ``blend_per_split``.
* :func:`load_sequences_per_dataset` reads a ``--per-dataset-sequences-path`` JSON file
  (``{prefix: [sequence_count, document_count]}``) so start-up opens one file instead
  of one ``.idx`` per prefix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Optional, Union, cast

from tokenloom.datasets.split import Split, normalize
from tokenloom.errors import ConfigError, UntrustedFileError
from tokenloom.untrusted_json import read_json_file

__all__ = [
    "Split",
    "normalize",
    "Blend",
    "get_blend_from_list",
    "get_blend_per_split_from_file",
    "get_blend_per_split_from_dict",
    "load_sequences_per_dataset",
]

Blend = tuple[list[str], Optional[list[float]]]


def _as_weight(text: str) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def get_blend_from_list(blend: Optional[Sequence[str]]) -> Optional[Blend]:
    """Parse a flat blend list into ``(prefixes, weights or None)``.

    ``["30", "a", "70", "b"] -> (["a", "b"], [30.0, 70.0])``; a list of bare prefixes
    (or any odd-length list) gives ``(prefixes, None)``. ``None`` gives ``None``.
    """
    if blend is None:
        return None
    if isinstance(blend, (str, bytes)) or not isinstance(blend, Sequence):
        raise ConfigError(
            f"blend list {blend!r}: expected a list such as ['30', 'path/a', '70', 'path/b'] "
            "or ['path/a', 'path/b']"
        )
    blend = [str(item) for item in blend]
    if not blend:
        raise ConfigError("blend list is empty; give at least one dataset prefix")
    if len(blend) % 2 == 1:
        return [item.strip() for item in blend], None
    weights = [_as_weight(blend[i]) for i in range(0, len(blend), 2)]
    prefixes = [blend[i + 1] for i in range(0, len(blend), 2)]
    unparsed = [blend[2 * i] for i, weight in enumerate(weights) if weight is None]
    if unparsed and len(unparsed) < len(weights):
        raise ConfigError(
            f"blend list {blend!r} mixes weights and prefixes: {unparsed!r} should be "
            "weights; write either 'weight prefix weight prefix ...' or only prefixes"
        )
    if unparsed:
        return [item.strip() for item in blend], None
    return [prefix.strip() for prefix in prefixes], [w for w in weights if w is not None]


def get_blend_per_split_from_dict(
    per_split: Mapping[str, object], source: str = "per-split blend"
) -> list[Optional[Blend]]:
    """``{"train": [...], "valid": [...], "test": [...]}`` -> ``blend_per_split``.

    Each value is a blend list (or a whitespace separated string) or ``null`` for a
    split without data. Every split key must be present.
    """
    if not isinstance(per_split, Mapping):
        raise ConfigError(f"{source}: expected a JSON object with keys train, valid, test")
    unknown = sorted(set(per_split) - {split.name for split in Split})
    if unknown:
        raise ConfigError(f"{source}: unknown keys {unknown}; use only train, valid, test")
    blends: list[Optional[Blend]] = []
    for split in Split:
        if split.name not in per_split:
            raise ConfigError(
                f"{source}: key {split.name!r} is missing; give its blend list or set it "
                f"to null to build no {split.name} split"
            )
        value = per_split[split.name]
        if isinstance(value, str):
            value = value.split()
        # get_blend_from_list checks the value is a list of strings
        blends.append(get_blend_from_list(cast("Optional[Sequence[str]]", value)))
    return blends


def get_blend_per_split_from_file(path: Union[str, os.PathLike[str]]) -> list[Optional[Blend]]:
    """Read a ``--per-split-data-args-path`` JSON file into ``blend_per_split``."""
    # get_blend_per_split_from_dict checks the JSON value is an object
    data = cast("Mapping[str, object]", _read_json(path))
    return get_blend_per_split_from_dict(data, source=str(path))


_MAX_JSON_BYTES = 256 << 20  # a sequences-per-dataset file of a million prefixes


def _read_json(path: Union[str, os.PathLike[str]]) -> object:
    """The JSON file at ``path``, read bounded in size and depth (a ConfigError else)."""
    try:
        return read_json_file(
            path, what="JSON file", max_bytes=_MAX_JSON_BYTES, max_depth=32, allow_stream=True
        )
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UntrustedFileError as error:
        raise ConfigError(f"{path}: cannot read it as JSON (the file {error.problem})") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read it as JSON ({error})") from None


def _counts(prefix: str, value: object, source: str) -> tuple[int, int]:
    if isinstance(value, Mapping):
        value = (value.get("sequence_count"), value.get("document_count"))
    if not (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise ConfigError(
            f"{source}: entry for {prefix!r} is {value!r}; expected "
            "[sequence_count, document_count] as two non-negative integers"
        )
    return int(value[0]), int(value[1])


def load_sequences_per_dataset(
    source: Union[str, os.PathLike[str], Mapping[str, object]],
) -> dict[str, tuple[int, int]]:
    """Normalise ``sequences_per_dataset`` (a JSON path or a mapping) to
    ``{prefix: (sequence_count, document_count)}``."""
    name = "sequences_per_dataset"
    data: object = source
    if isinstance(source, (str, os.PathLike)):
        name = f"sequences_per_dataset file {source}"
        data = _read_json(source)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{name}: expected a mapping {{prefix: [sequence_count, document_count]}}"
        )
    return {str(prefix): _counts(prefix, value, name) for prefix, value in data.items()}
