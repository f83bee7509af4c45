"""Field checks used by the dataset configs; each raises ConfigError naming the field."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, TypeGuard

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

OBJECT_STORAGE_SCHEMES = ("s3://", "msc://")


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_finite(value: float) -> bool:
    """``math.isfinite`` that says False (instead of raising) for integers too large to
    be a float, such as ``10**400``."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_real(name: str, value: object, low: float, high: float, default: str = "") -> None:
    """``value`` must be a real number (not a bool) in ``[low, high]``: NaN, infinities
    and integers too large for a float are refused."""
    if not is_real(value) or not is_finite(value) or not low <= value <= high:
        hint = f" (default {default})" if default else ""
        raise ConfigError(f"{name}={value!r}: must be a finite number in [{low:g}, {high:g}]{hint}")


def check_int(name: str, value: object, low: int, high: Optional[int] = None) -> None:
    """``value`` must be an integer in ``[low, high]``."""
    if not is_int(value) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"{name}={value!r}: must be an integer {bound}")


def check_bool(name: str, value: object, allow_none: bool = False) -> None:
    """``value`` must be True or False (or None when ``allow_none``)."""
    if value is None and allow_none:
        return
    if not isinstance(value, (bool, numpy.bool_)):
        raise ConfigError(f"{name}={value!r}: must be True or False")


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """ConfigError unless ``value`` is one of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {list(choices)}; pass one of those")


def _attribute(tokenizer: object, name: str) -> object:
    try:
        return getattr(tokenizer, name)
    except Exception:  # noqa: BLE001 - Megatron tokenizers raise NotImplementedError
        raise ConfigError(
            f"tokenizer {type(tokenizer).__name__} has no usable {name!r}; the GPT datasets "
            "need vocab_size and eod (e.g. SimpleTokenizer(vocab_size=32000, eod=2))"
        ) from None


def coerce_tokenizer(tokenizer: object, simple: Callable[..., object]) -> object:
    """Check ``vocab_size``/``eod``; a mapping becomes ``simple(**mapping)`` (the
    config's ``SimpleTokenizer``, passed in: this module must not import the config)."""
    if isinstance(tokenizer, Mapping):
        unknown = sorted(set(tokenizer) - {"vocab_size", "eod", "pad"})
        if unknown or "eod" not in tokenizer or "vocab_size" not in tokenizer:
            raise ConfigError(
                f"tokenizer={dict(tokenizer)!r}: expected keys vocab_size, eod and optionally pad"
            )
        tokenizer = simple(**tokenizer)
    vocab_size = _attribute(tokenizer, "vocab_size")
    if vocab_size is not None and (not is_int(vocab_size) or vocab_size < 1):
        raise ConfigError(
            f"tokenizer.vocab_size={vocab_size!r}: must be a positive integer or None"
        )
    eod = _attribute(tokenizer, "eod")
    if not is_int(eod) or eod < 0:
        raise ConfigError(f"tokenizer.eod={eod!r}: must be a non-negative integer token id")
    pad = read_attribute(tokenizer, "pad", None) if _has_pad(tokenizer) else None
    if pad is not None and not is_int(pad):
        raise ConfigError(f"tokenizer.pad={pad!r}: must be an integer token id or None")
    return tokenizer


def _has_pad(tokenizer: object) -> bool:
    try:
        getattr(tokenizer, "pad")  # noqa: B009 - a property that may raise
    except Exception:  # megatron tokenizers raise NotImplementedError for a missing pad
        return False
    return True


def _check_prefixes(name: str, prefixes: object) -> list[str]:
    if isinstance(prefixes, (str, bytes)) or not isinstance(prefixes, Sequence) or not prefixes:
        raise ConfigError(f"{name}: the prefix list {prefixes!r} must be a non-empty list of paths")
    result = []
    for prefix in prefixes:
        if not isinstance(prefix, (str, os.PathLike)) or not os.fspath(prefix):
            raise ConfigError(f"{name}: prefix {prefix!r} must be a non-empty path string")
        result.append(os.fspath(prefix))
    return result


def _check_weights(name: str, weights: object, count: int) -> Optional[list[float]]:
    if weights is None:
        return None
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigError(f"{name}: weights {weights!r} must be a list of numbers or None")
    if len(weights) != count:
        raise ConfigError(
            f"{name}: {count} prefixes but {len(weights)} weights; blend prefixes and weights "
            "must be equal in number"
        )
    for weight in weights:
        if type(weight) is float and 0 < weight < math.inf:  # the usual case, at once
            continue
        if not is_real(weight) or not is_finite(weight) or weight <= 0:
            raise ConfigError(
                f"{name}: weight {weight!r} must be a finite number > 0; remove a prefix "
                "instead of giving it weight 0"
            )
    if not math.isfinite(sum(float(weight) for weight in weights)):
        raise ConfigError(
            f"{name}: weights {list(weights)} are too large to add up as floats; "
            "only their ratios matter, scale them down (e.g. to sum to 1)"
        )
    return list(weights)


def check_blend(name: str, blend: object) -> tuple[list[str], Optional[list[float]]]:
    """A blend is ``(prefixes, weights or None)``; returns it with lists inside."""
    looks_flat = isinstance(blend, Sequence) and all(isinstance(b, str) for b in blend)
    if (
        isinstance(blend, (str, bytes))
        or looks_flat
        or not isinstance(blend, Sequence)
        or len(blend) != 2
    ):
        raise ConfigError(
            f"{name}={blend!r}: expected (prefixes, weights or None), e.g. "
            "(['path/a', 'path/b'], [0.3, 0.7]); convert a flat list such as "
            "['30', 'path/a', '70', 'path/b'] with get_blend_from_list"
        )
    prefixes = _check_prefixes(name, blend[0])
    return prefixes, _check_weights(name, blend[1], len(prefixes))


def check_object_storage(config: Any) -> None:
    """s3:// and msc:// prefixes need an ``.idx`` cache directory (mmap_bin_files=True is
    fine: object storage is then read by ranges, see tokenloom.storage)."""
    remote = [p for p in config.prefixes() if p.startswith(OBJECT_STORAGE_SCHEMES)]
    if not remote:
        return
    if (
        config.object_storage_cache_path is None
        and read_attribute(config, "object_storage_config", None) is None
    ):
        raise ConfigError(
            f"prefix {remote[0]!r} is in object storage: set object_storage_cache_path to a "
            "local directory for its .idx files"
        )


def check_special_ids(tokenizer: Any, vocab_size: Any) -> None:
    """ConfigError when ``eod``/``pad`` is not an id of the vocabulary (pad -1 is allowed:
    Megatron's "no pad token")."""
    for name in ("eod", "pad"):
        # read_attribute treats a read that raises (Megatron tokenizers raise
        # NotImplementedError) as absent
        value = read_attribute(tokenizer, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"tokenizer.{name} = {value!r}: a token id must be an integer")
        value = int(value)
        too_big = isinstance(vocab_size, numbers.Integral) and value >= int(vocab_size)
        if too_big or value < -1 or (value == -1 and name == "eod"):
            raise ConfigError(
                f"tokenizer.{name} = {value} is not a token id of the vocabulary (vocab_size "
                f"{vocab_size}): samples would hold an id the model has no embedding for; fix "
                f"the tokenizer's {name} or its vocab_size"
            )


def means_none(value: object) -> bool:
    """megatron-core reads ``sequences_per_dataset`` with ``if value:``: any false value
    is "none". A value whose truth is ambiguous (an array) is not false; it is then
    refused as a mapping by :func:`load_sequences_per_dataset`."""
    if value is None:
        return True
    try:
        return not value
    except Exception:  # noqa: BLE001 - ambiguous truth (numpy arrays): not "none"
        return False
