"""Merging pairs: the tokenizer check before a merge and the merged pair's sidecar."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from tokenloom.errors import ConfigError
from tokenloom.provenance.sidecar import (
    FORMAT,
    SUFFIX,
    encode_sidecar,
    pair_counts,
    tool_version,
)
from tokenloom.provenance.tokenizer import SETTING_KEYS, tokenizer_label, vocabulary_key

__all__ = ["check_tokenizers", "merged_sidecar"]


def check_tokenizers(
    sidecars: Sequence[tuple[str, Optional[Mapping[str, Any]]]], allow_mixed: bool = False
) -> list[str]:
    """Refuse to merge pairs made by different tokenizers; return notes for the user.

    Raises ConfigError naming the first two prefixes and their tokenizers when the
    vocabularies differ, unless ``allow_mixed``.  Pairs without a sidecar cannot be
    checked: a note says so.  Different special-token settings of one vocabulary are a
    note, not an error."""
    notes = [
        f"{prefix}: no provenance sidecar (a Megatron-built pair?): its tokenizer is not checked"
        for prefix, record in sidecars
        if record is None
    ]
    notes += [
        f"{prefix}: its sidecar names no single tokenizer (a merge of unchecked "
        "pairs): its tokenizer is not checked"
        for prefix, record in sidecars
        if record is not None and not record.get("tokenizer")
    ]
    known = [
        (prefix, dict(record["tokenizer"]))
        for prefix, record in sidecars
        if record is not None and record.get("tokenizer")
    ]
    if not known:
        return notes
    first_prefix, first = known[0]
    for prefix, identity in known[1:]:
        if vocabulary_key(identity) != vocabulary_key(first):
            message = (
                f"{first_prefix} was tokenized with {tokenizer_label(first)} but {prefix} "
                f"with {tokenizer_label(identity)}"
            )
            if not allow_mixed:
                raise ConfigError(
                    f"refusing to merge: {message}; their token ids mean different "
                    "things. Pass --allow-mixed-tokenizers to merge anyway"
                )
            notes.append(f"warning: mixing tokenizers: {message}")
        else:
            notes += [
                f"note: {prefix} has {name}={identity.get(name)!r} but {first_prefix} "
                f"{first.get(name)!r}"
                for name in SETTING_KEYS
                if identity.get(name) != first.get(name)
            ]
    return notes


def _merged_tokenizer(records: Sequence[Optional[Mapping[str, Any]]]) -> Optional[dict[str, Any]]:
    identities = [None if record is None else record.get("tokenizer") for record in records]
    if any(not identity for identity in identities):
        return None  # some input's tokenizer is unknown
    known = [dict(identity) for identity in identities if identity]
    if all(vocabulary_key(identity) == vocabulary_key(known[0]) for identity in known):
        return known[0]
    return {
        "kind": "mixed",
        "parts": list({json.dumps(i, sort_keys=True): i for i in known}.values()),
    }


def merged_sidecar(sidecars: Sequence[tuple[str, Optional[Mapping[str, Any]]]]) -> dict[str, bytes]:
    """The ``{".json": bytes}`` extra file of a merge of ``sidecars``' prefixes.

    Its ``tokenizer`` is None when some input has no sidecar (nothing reliable to
    record); the counts come from the pairs themselves."""
    merged_from, inputs = [], []
    totals = {"documents": 0, "sequences": 0, "tokens": 0, "bin_bytes": 0}
    for prefix, record in sidecars:
        counts = pair_counts(prefix)
        for name in totals:
            totals[name] += counts[name]
        merged_from.append(
            {
                "prefix": os.path.abspath(prefix),
                "counts": counts,
                "has_sidecar": record is not None,
                "settings": None if record is None else record.get("settings"),
            }
        )
        inputs += [] if record is None else list(record.get("inputs") or [])
    record = {
        "format": FORMAT,
        "tool": {"name": "tokenloom", "version": tool_version()},
        "tokenizer": _merged_tokenizer([record for _, record in sidecars]),
        "merged_from": merged_from,
        "inputs": inputs,
        "counts": totals,
    }
    return {SUFFIX: encode_sidecar(record)}
