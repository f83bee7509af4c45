"""Provenance sidecars: ``PREFIX.json`` next to a ``.bin``/``.idx`` pair says how it was made.

A sidecar holds the tokenizer's identity (kind, file hashes, vocabulary size, special
tokens and their ids), the settings that shaped the ids (special tokens added, EOD
appended, JSON key, sequence level), the inputs (paths, sizes, SHA-256), the tool
version and the document, sequence and token counts.  ``tokenloom preprocess`` and
``tokenloom merge`` publish it atomically with the pair (one journaled publish, see
:mod:`tokenloom.format.publish`); the ``.bin``/``.idx`` bytes stay exactly Megatron's.

The sidecar is optional to read.  Datasets built by Megatron have none, and every
reader works without one: :func:`read_sidecar` returns None, and the merge check
(:func:`check_tokenizers`) notes what it could not check instead of failing.

Schema (``"format": "tokenloom-provenance/1"``)::

    {"format", "tool": {"name", "version"}, "tokenizer": {identity},
     "settings": {"json_key", "level", "append_eod", "eod_id", "add_special_tokens", ...},
     "inputs": [{"kind": "file", "path", "bytes", "sha256"}, ...],
     "counts": {"documents", "sequences", "tokens", "empty_documents", "bin_bytes"}}

A merged pair's sidecar has ``"merged_from"`` (each input prefix, its counts and
settings) instead of ``settings``; its ``tokenizer`` is null when some input had no
sidecar, and ``{"kind": "mixed", "parts": [...]}`` after merging pairs of different
tokenizers (allowed only on request).
"""

from tokenloom.provenance.inputs import describe_inputs, file_record
from tokenloom.provenance.merge import check_tokenizers, merged_sidecar
from tokenloom.provenance.sidecar import (
    FORMAT,
    MAX_SIDECAR_BYTES,
    SUFFIX,
    encode_sidecar,
    pair_counts,
    preprocess_sidecars,
    read_sidecar,
    read_sidecars,
    sidecar_path,
    stale_problems,
    tool_version,
)
from tokenloom.provenance.tokenizer import tokenizer_identity, tokenizer_label, vocabulary_key

__all__ = [
    "FORMAT",
    "MAX_SIDECAR_BYTES",
    "SUFFIX",
    "sidecar_path",
    "tokenizer_identity",
    "tokenizer_label",
    "vocabulary_key",
    "describe_inputs",
    "file_record",
    "encode_sidecar",
    "preprocess_sidecars",
    "read_sidecar",
    "read_sidecars",
    "stale_problems",
    "check_tokenizers",
    "merged_sidecar",
    "pair_counts",
    "tool_version",
]
