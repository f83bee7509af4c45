"""Which tokenizer made a pair: its identity in a sidecar, a one-line label for
messages, and the key that decides whether two pairs' token ids mean the same."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Optional

from tokenloom.attributes import read_attribute

__all__ = ["SETTING_KEYS", "tokenizer_identity", "tokenizer_label", "vocabulary_key"]

SETTING_KEYS = ("add_special_tokens", "add_bos")
"""Identity keys that are settings of one vocabulary, not a different vocabulary."""
_NOT_COMPARED = ("files",) + SETTING_KEYS


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """The tokenizer's identity, JSON-ready.

    Uses the tokenizer's own ``identity()`` where it has one (tokenloom's adapters);
    otherwise derives it from the public attributes (``vocab_size``, ``eod``, ``pad``,
    ``unique_identifiers``)."""
    own = read_attribute(tokenizer, "identity", None)
    identity = dict(own()) if callable(own) else _derived_identity(tokenizer)
    return json.loads(json.dumps(identity, default=str))  # plain JSON types only


def _derived_identity(tokenizer: Any) -> dict[str, Any]:
    identity: dict[str, Any] = {"kind": type(tokenizer).__name__}
    for name, value in dict(read_attribute(tokenizer, "unique_identifiers", None) or {}).items():
        if name != "class":
            identity["files" if name == "tokenizer_path" else name] = value
    for name in ("vocab_size", "eod", "pad"):
        value = read_attribute(tokenizer, name, None)
        identity[name] = None if value is None else int(value)
    identity.setdefault("special_tokens", {})
    return identity


def _short_hash(identity: Mapping[str, Any]) -> str:
    digest = identity.get("sha256")
    return f" sha256 {str(digest)[:12]}" if digest else ""


def tokenizer_label(identity: Optional[Mapping[str, Any]]) -> str:
    """A one-line name for messages: kind, first file, hash prefix, vocabulary size."""
    if not identity:
        return "an unknown tokenizer (no sidecar)"
    if identity.get("kind") == "mixed":
        parts = identity.get("parts") or []
        return f"mixed tokenizers ({', '.join(tokenizer_label(p) for p in parts)})"
    files = identity.get("files") or []
    where = f" {os.path.basename(str(files[0]))}" if files else ""
    return (
        f"{identity.get('kind', '?')}{where}{_short_hash(identity)} "
        f"(vocab {identity.get('vocab_size', '?')})"
    )


def vocabulary_key(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an identity that decide the vocabulary (file paths and the
    special-token settings left out): equal keys mean the ids mean the same."""
    return {k: v for k, v in identity.items() if k not in _NOT_COMPARED}
