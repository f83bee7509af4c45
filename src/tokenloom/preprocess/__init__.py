"""Tokenize JSONL text into Megatron ``.bin``/``.idx`` pairs (``tokenloom preprocess``).

:func:`preprocess` reads plain or compressed JSONL files (globs allowed), batch-encodes
the strings under each ``json_keys`` key with any :mod:`tokenloom.tokenizers`
tokenizer, and writes ``{output_prefix}_{key}_document.bin/.idx`` with the token dtype
chosen from the vocabulary size.

Bad input follows a :class:`Policy`; each kind is ``fail`` (stop, naming file and
line) or ``skip`` (drop and count in the summary):

* malformed JSON / not a JSON object (``on_bad_json``, default ``fail``),
* a missing key (``on_missing_key``, default ``fail``),
* a value that is not a string (``on_bad_type``, default ``fail``),
* a document that encodes to zero tokens (``on_empty``, default ``skip``; also ``keep``).

Blank lines are ignored and counted.  Nothing is dropped without being counted in the
returned :class:`PreprocessSummary`.
"""

from tokenloom.preprocess.inputs import RawChunk, detect_compression, expand_inputs, iter_chunks
from tokenloom.preprocess.pipeline import output_prefix_for, preprocess
from tokenloom.preprocess.records import Policy
from tokenloom.preprocess.summary import OutputStats, PreprocessSummary

__all__ = [
    "preprocess",
    "Policy",
    "PreprocessSummary",
    "OutputStats",
    "output_prefix_for",
    "expand_inputs",
    "detect_compression",
    "iter_chunks",
    "RawChunk",
]
