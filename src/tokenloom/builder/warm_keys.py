"""The cache keys of a warm start, written from a prefix's known facts.

A :class:`PrefixWarmStart` gives the GPT datasets of one prefix whose facts the
start-up memo vouches for (:mod:`tokenloom.builder.startup`) their cache key, written
directly (the same text as the full description, which ``test_builder_warm_keys``
compares) instead of built from the identifiers, and the sample count the memo
recorded for that key. The config part of the text is the same for every prefix of
a build; :class:`BuildMiddles` writes it once per build.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _ascii
from typing import Any, Optional

from tokenloom.builder.memo import StartupMemo
from tokenloom.cache import CacheKey, describe, json_scalar
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.datasets.gpt import GPTDataset
from tokenloom.datasets.megatron_dataset import tokenizer_identity
from tokenloom.format import PairFacts
from tokenloom.format.identity import DIGEST_NAME
from tokenloom.process_caches import GPT_DESCRIPTION_MIDDLES

__all__ = ["BuildMiddles", "PrefixWarmStart", "identity_json"]

_UNIQUE_KEYS = (
    "class",
    "dataset_path",
    "num_samples",
    "index_split",
    "random_seed",
    "sequence_length",
    "split",
    "split_matrix",
    "tokenizer",
)
_FOUR_INTS = [int] * 4
_DIGEST_JSON = json_scalar(DIGEST_NAME)


class PrefixWarmStart:
    """The :class:`~tokenloom.datasets.gpt.WarmStart` of the GPT datasets of one prefix
    whose facts are known.

    Args:
        facts: the prefix's facts.
        memo: the blend's memo (sample counts by cache stem).
        exact_gpt: whether the datasets are plain ``GPTDataset``s (the direct key is
            written for those only: a subclass may describe itself differently).
    """

    def __init__(
        self,
        facts: PairFacts,
        memo: StartupMemo,
        exact_gpt: bool,
        middles: Optional[BuildMiddles] = None,
    ) -> None:
        self.facts, self.memo, self.exact_gpt = facts, memo, exact_gpt
        self.middles = middles if middles is not None else BuildMiddles()

    def cache_key(self, dataset: GPTDataset) -> Optional[CacheKey]:
        """``CacheKey(class, split, dataset.cache_identifiers)``, its description written
        piece by piece (the JSON of a mapping is its members' JSON joined)."""
        ids = dataset.unique_identifiers
        if not self.exact_gpt or type(dataset) is not GPTDataset or tuple(ids) != _UNIQUE_KEYS:
            return None
        config = dataset.config
        if not isinstance(config, GPTDatasetConfig):
            return None
        middle = self.middles.text(ids, config, dataset.drop_last_partial_sequence)
        path, count = ids["dataset_path"], ids["num_samples"]
        text = (  # a str is encode_basestring_ascii's, an int its repr (json_scalar's rule)
            f'{{"class":{json_scalar(ids["class"])},"dataset_path":'
            f'{_ascii(path) if type(path) is str else json_scalar(path)},"num_samples":'
            f"{int.__repr__(count) if type(count) is int else json_scalar(count)},"
            f'"index_split":{json_scalar(ids["index_split"])},{middle},"sequence_count":'
            f'{json_scalar(self.facts.sequence_count)},"data":{identity_json(self.facts)}}}'
        )
        return CacheKey.from_description(type(dataset).__name__, dataset.index_split.name, text)

    def known_length(self, key: CacheKey) -> Optional[int]:
        """Samples of the entry cached under ``key``, as the memo recorded them."""
        return self.memo.length(key.stem)


def identity_json(facts: PairFacts) -> str:
    """``describe(facts.file_identity())``, written directly (sizes and times are ints,
    the digest a str: see ``test_builder_warm_keys``)."""
    size, mtime = facts.idx_stat[0], facts.idx_stat[1]
    numbers = [size, mtime, facts.bin_size, facts.bin_mtime_ns]
    if list(map(type, numbers)) == _FOUR_INTS and type(facts.idx_digest) is str:
        return (  # ints are their own JSON (int.__format__ is int.__repr__)
            f'{{"idx":{{"size":{size},"mtime_ns":{mtime},{_DIGEST_JSON}:'
            f'{json_scalar(facts.idx_digest)}}},"bin":{{"size":{facts.bin_size},'
            f'"mtime_ns":{facts.bin_mtime_ns}}}}}'
        )
    return (
        f'{{"idx":{{"size":{size},"mtime_ns":{mtime},{json_scalar(DIGEST_NAME)}:'
        f'{json_scalar(facts.idx_digest)}}},"bin":{{"size":{json_scalar(facts.bin_size)},'
        f'"mtime_ns":{json_scalar(facts.bin_mtime_ns)}}}}}'
    )


class BuildMiddles:
    """The config part of the descriptions of one build's datasets (see
    :func:`_middle_description`), remembered per ``drop_last`` while the values it is
    made of are the very same objects (every dataset of a build reads one config)."""

    def __init__(self) -> None:
        self._known: dict[bool, tuple[tuple[object, ...], str]] = {}

    def text(self, ids: Mapping[str, Any], config: GPTDatasetConfig, drop_last: bool) -> str:
        """The description's config members, joined (no braces)."""
        parts = (
            ids["random_seed"],
            ids["sequence_length"],
            ids["split"],
            ids["split_matrix"],
            config.tokenizer,
            config.add_extra_token_to_sequence,
        )
        known = self._known.get(drop_last)
        if known is not None and all(map(operator.is_, known[0], parts)):
            return known[1]
        text = _middle_description(ids, config, drop_last)[1:-1]
        self._known[drop_last] = (parts, text)
        return text


def _middle_description(ids: Mapping[str, Any], config: GPTDatasetConfig, drop_last: bool) -> str:
    """The config part of a GPT cache description (the same for every prefix of a blend),
    remembered by the exact values it is made of; the tokenizer identity is compared by
    value (a copy is kept), so a changed tokenizer is never described by an old text."""
    tokenizer = tokenizer_identity(config.tokenizer)
    extra = bool(config.add_extra_token_to_sequence)
    key: Optional[tuple[str, bool, bool]]
    try:  # repr tells 4096 from 4096.0, True and numpy.int64(4096): a type change misses
        key = (
            repr((ids["random_seed"], ids["sequence_length"], ids["split"], ids["split_matrix"])),
            extra,
            drop_last,
        )
        known = GPT_DESCRIPTION_MIDDLES.get(key)
        if isinstance(known, tuple) and type(known[0]) is type(tokenizer) and known[0] == tokenizer:
            return str(known[1])
    except (TypeError, ValueError):  # unhashable or incomparable values: no memo
        key = None
    text = describe(
        {
            "random_seed": ids["random_seed"],
            "sequence_length": ids["sequence_length"],
            "split": ids["split"],
            "split_matrix": ids["split_matrix"],
            "tokenizer": tokenizer,
            "add_extra_token_to_sequence": extra,
            "drop_last_partial_sequence": drop_last,
        }
    )
    if key is not None:
        try:
            GPT_DESCRIPTION_MIDDLES.put(key, (copy.deepcopy(tokenizer), text))
        except Exception:  # noqa: BLE001 - an identity that cannot be copied: no memo
            pass
    return text
