"""``max_epochs_per_source``: how often a source's tokens may be served (issue 20 §3).

A source's *repetitions* are the tokens drawn from it over the tokens its split holds,
``(drawn * sequence_length + extra) / tokens`` (``extra`` = ``add_extra_token_to_sequence``),
the figure ``tokenloom plan`` prints; OLMo-core's ``max_repetitions``. A cap is a number
> 0 (``inf``: none) or one per prefix of ``blend``. :func:`check_repetitions` refuses a
built dataset whose blend passes a cap, naming the repetitions it would reach and the
global sample at which it passes the cap; ``tokenloom plan`` warns with the same
arithmetic (:func:`repetitions`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets import _checks as checks
from tokenloom.errors import ConfigError

__all__ = ["cap_of", "check_cap", "check_repetitions", "passing_count", "repetitions"]

Cap = Union[float, list[float]]


def check_cap(cap: Any, prefixes: Optional[Sequence[str]], where: str) -> Optional[Cap]:
    """``cap`` validated: None, a number > 0 or one number > 0 per prefix of ``blend``."""
    if cap is None:
        return None
    if checks.is_real(cap):
        return _positive(cap, where)
    if isinstance(cap, (str, bytes)) or not isinstance(cap, Sequence):
        raise ConfigError(
            f"{where}={cap!r} must be a number > 0 (the repetitions allowed per source) or "
            "one per prefix of blend"
        )
    if prefixes is None or len(cap) != len(prefixes):
        count = "no blend" if prefixes is None else f"{len(prefixes)} prefixes in blend"
        raise ConfigError(
            f"{where} has {len(cap)} caps for {count}: a list needs blend and one cap per "
            "prefix, in its order (or give one number for all)"
        )
    return [_positive(value, f"{where}[{k}]") for k, value in enumerate(cap)]


def _positive(value: Any, where: str) -> float:
    if not checks.is_real(value) or math.isnan(float(value)) or not float(value) > 0:
        raise ConfigError(f"{where}={value!r} must be a number > 0 (inf: no cap)")
    return float(value)


def cap_of(cap: Optional[Cap], k: int) -> float:
    """The cap of source ``k`` (``inf`` when there is none)."""
    if cap is None:
        return math.inf
    return float(cap[k]) if isinstance(cap, list) else float(cap)


def repetitions(drawn: int, tokens: int, seq: int, extra: int) -> float:
    """How many times a source's ``tokens`` are served when ``drawn`` samples are."""
    if not drawn:
        return 0.0
    return math.inf if not tokens else (drawn * seq + extra) / tokens


def passing_count(cap: float, tokens: int, seq: int, extra: int) -> int:
    """The fewest samples drawn whose :func:`repetitions` pass ``cap``."""
    n = max(1, math.floor((cap * tokens - extra) / seq))
    while repetitions(n, tokens, seq, extra) <= cap:
        n += 1
    while n > 1 and repetitions(n - 1, tokens, seq, extra) > cap:
        n -= 1
    return n


def _tokens(dataset: Any) -> Optional[int]:
    count = read_attribute(dataset, "_get_num_tokens_per_epoch", None)
    if count is None or read_attribute(dataset, "indices", None) is None:
        return None  # not a GPT-style dataset (mock data), or fast_cache_load
    return int(count())


def check_repetitions(dataset: Any, config: Any, split_name: str) -> None:
    """ConfigError when a built split (a BlendedDataset or one dataset) serves a source
    more often than ``config.max_epochs_per_source`` allows."""
    cap = read_attribute(config, "max_epochs_per_source", None)
    if cap is None or dataset is None:
        return
    parts = read_attribute(dataset, "datasets", None)
    if parts is None:  # one dataset serves the split
        parts, dataset_index = [dataset], None
        drawn = [len(dataset)]
    else:
        dataset_index = numpy.asarray(dataset.dataset_index)
        drawn = numpy.bincount(dataset_index, minlength=len(parts)).tolist()
    seq, extra = int(config.sequence_length), int(config.add_extra_token_to_sequence)
    for k, part in enumerate(parts):
        tokens, limit = _tokens(part), cap_of(cap, k)
        if tokens is None or repetitions(drawn[k], tokens, seq, extra) <= limit:
            continue
        n = passing_count(limit, tokens, seq, extra)
        where = (
            n - 1 if dataset_index is None else int(numpy.flatnonzero(dataset_index == k)[n - 1])
        )
        name = read_attribute(part, "dataset_path", None) or type(part).__name__
        reached = repetitions(drawn[k], tokens, seq, extra)
        raise ConfigError(
            f"the {split_name} split serves {name} {reached:.2f} times ({drawn[k]} samples of {seq} tokens from {tokens} tokens), past "
            f"max_epochs_per_source={limit:g}: it passes the cap at global sample {where} "
            f"(its sample {n}). Lower its weight, ask for fewer samples, or raise the cap"
        )
