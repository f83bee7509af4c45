"""Tokenize text into Megatron ``.bin``/``.idx`` pairs (``tokenloom preprocess``).

:func:`preprocess` reads JSONL (plain or compressed, globs allowed), Parquet files,
Hugging Face datasets, byte ranges of a JSONL file (:class:`FileRange`) or any
iterable of records or texts, batch-encodes the values under each ``json_keys`` key
with any :mod:`tokenloom.tokenizers` tokenizer (Megatron's own tokenizer types
included, see :mod:`tokenloom.tokenizers.megatron`), and writes
``{output_prefix}_{key}_document.bin/.idx`` byte-identical to Megatron-LM's
``tools/preprocess_data.py``.

Bad input follows a :class:`Policy`; each kind is ``fail`` (stop, naming file, line
and field) or ``skip`` (drop and count in the summary): malformed JSON (``on_bad_json``),
a missing key (``on_missing_key``), a value that is not text (``on_bad_type``), a blank
line (``on_blank_line``).  An empty document is kept with no sequence, as Megatron does
(``on_empty``: ``keep``, ``skip`` or ``fail``).  Nothing is dropped without being
counted in the returned :class:`PreprocessSummary`.
"""

from tokenloom.preprocess.inputs import RawChunk, detect_compression, expand_inputs, iter_chunks
from tokenloom.preprocess.pipeline import output_prefix_for, preprocess
from tokenloom.preprocess.records import Policy
from tokenloom.preprocess.sentences import RuleSentenceSplitter, punkt_splitter
from tokenloom.preprocess.sources import FileRange, HFDiskDataset
from tokenloom.preprocess.summary import OutputStats, PreprocessSummary

__all__ = [
    "preprocess",
    "Policy",
    "PreprocessSummary",
    "OutputStats",
    "FileRange",
    "HFDiskDataset",
    "RuleSentenceSplitter",
    "punkt_splitter",
    "output_prefix_for",
    "expand_inputs",
    "detect_compression",
    "iter_chunks",
    "RawChunk",
]
