"""The tokenizer of ``prepare-cache`` and ``preview``: flags, a config file, or sidecars.

The GPT datasets need the tokenizer's ``vocab_size``, ``eod`` and ``pad``, and its
``unique_identifiers`` go into every index-cache key, so the offline build must use
the tokenizer the training run uses.  It comes, in this order, from

1. Megatron's tokenizer flags (``--tokenizer-type`` ...) or tokenloom's ``--tokenizer
   SPEC``: the tokenizer ``tokenloom preprocess`` builds from the same flags
   (:func:`tokenloom.cli._preprocess_flags.tokenizer_from_settings`);
2. else ``--vocab-size``/``--eod``/``--pad``: a :class:`~tokenloom.datasets.SimpleTokenizer`,
   each value missing there taken from the blend's provenance sidecars
   (``PREFIX.json``, written by ``tokenloom preprocess``), which must agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from tokenloom.errors import ConfigError

TOKENIZER_SETTINGS = (
    "tokenizer_spec",
    "tokenizer_type",
    "tokenizer_model",
    "vocab_file",
    "merge_file",
    "vocab_size",
    "special_tokens",
    "legacy_tokenizer",
    "sp_ignore_spaces",
    "tokenizer_sentencepiece_legacy",
    "tiktoken_pattern",
    "tiktoken_num_special_tokens",
)
"""Config keys (and flag dests) of the tokenizer, besides ``eod`` and ``pad``."""

TOKENIZER_ALIASES = {
    "tokenizer_hf_include_special_tokens": "special_tokens",
    "add_special_tokens": "special_tokens",
    "tokenizer_sentencepiece_ignore_extra_whitespaces": "sp_ignore_spaces",
}
"""Megatron's names of some of them, as a config file may spell them."""

_IDS = ("vocab_size", "eod", "pad")


def names_tokenizer(settings: Mapping[str, Any]) -> bool:
    """Whether the settings name a tokenizer (``--tokenizer-type`` or ``--tokenizer``)."""
    return settings.get("tokenizer_type") is not None or settings.get("tokenizer_spec") is not None


def sidecar_ids(prefixes: Sequence[str]) -> dict[str, int]:
    """``vocab_size``, ``eod`` and ``pad`` (where known) of the tokenizer named by the
    prefixes' provenance sidecars; {} when none has one. ConfigError when two disagree."""
    from tokenloom.provenance import read_sidecar

    found: Optional[tuple[str, dict[str, int]]] = None
    for prefix in prefixes:
        record = read_sidecar(prefix)
        identity = (record or {}).get("tokenizer") or {}
        ids = {key: int(identity[key]) for key in _IDS if isinstance(identity.get(key), int)}
        if not ids:
            continue
        if found is not None and found[1] != ids:
            raise ConfigError(
                f"the provenance sidecars disagree on the tokenizer: {found[0]} has "
                f"{found[1]}, {prefix} has {ids}; give --vocab-size and --eod (or the "
                "tokenizer's flags) explicitly, or blend data of one tokenizer"
            )
        found = found or (prefix, ids)
    return dict(found[1]) if found else {}


def dataset_tokenizer(settings: Mapping[str, Any], prefixes: Sequence[str]) -> Any:
    """The tokenizer for the GPT config (see the module docstring)."""
    from tokenloom.datasets import SimpleTokenizer

    if names_tokenizer(settings):
        from tokenloom.cli._preprocess_flags import tokenizer_from_settings

        given = [f"--{key}" for key in ("eod", "pad") if settings.get(key) is not None]
        if given:
            raise ConfigError(
                f"{' and '.join(given)} cannot be combined with a tokenizer "
                "(--tokenizer-type or --tokenizer): its own ids are used; drop them"
            )
        return tokenizer_from_settings(settings)
    ids = {key: settings.get(key) for key in _IDS}
    if ids["vocab_size"] is None or ids["eod"] is None:
        inferred = sidecar_ids(prefixes)
        ids = {key: inferred.get(key) if ids[key] is None else ids[key] for key in _IDS}
    if ids["vocab_size"] is None or ids["eod"] is None:
        raise ConfigError(
            "give the tokenizer (it shapes the samples): --vocab-size and --eod, Megatron's "
            "--tokenizer-type with its --tokenizer-model/--vocab-file flags, or "
            "--tokenizer SPEC; none of the blend's prefixes has a provenance sidecar "
            "naming one"
        )
    return SimpleTokenizer(ids["vocab_size"], ids["eod"], ids["pad"])


__all__ = [
    "TOKENIZER_ALIASES",
    "TOKENIZER_SETTINGS",
    "dataset_tokenizer",
    "names_tokenizer",
    "sidecar_ids",
]
