"""Helpers for the dataset tests: golden cases, configs and real small corpora."""

from __future__ import annotations

import json
from pathlib import Path

import numpy

from tokenloom.datasets import GPTDatasetConfig, Split, split_document_range

GOLDEN_DIR = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "golden" / "megatron-core-0.16.1"
).resolve()

# the defaults the golden README says every case starts from
GOLDEN_DEFAULTS = dict(
    random_seed=1234,
    sequence_length=64,
    reset_position_ids=False,
    reset_attention_mask=False,
    eod_mask_loss=False,
    create_attention_mask=True,
    add_extra_token_to_sequence=True,
    drop_last_partial_validation_sequence=True,
    mid_level_dataset_surplus=0.005,
)
TOKENIZER = {"vocab_size": 32000, "eod": 2}
FLAGS = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)


def golden_case(name: str) -> dict:
    manifest = json.loads((GOLDEN_DIR / "manifest.json").read_text())
    return next(case for case in manifest["cases"] if case.get("name") == name)


def golden_config(case: dict, path_to_cache=None, **overrides) -> GPTDatasetConfig:
    """The GPTDatasetConfig of a golden case, prefixes made absolute."""
    fields = dict(GOLDEN_DEFAULTS)
    fields.update(case["config"])
    if fields.get("blend") is not None:
        fields["blend"] = [[str(GOLDEN_DIR / p) for p in fields["blend"][0]], fields["blend"][1]]
    tokenizer = {k: v for k, v in case["tokenizer"].items() if v is not None}
    fields.update(tokenizer=tokenizer, path_to_cache=path_to_cache, **overrides)
    return GPTDatasetConfig(**fields)


def split_indices(config, split: Split, num_elements: int) -> numpy.ndarray:
    """The document ids of ``split``, computed as the builder does."""
    begin, end = split_document_range(config.split_matrix[split.value], num_elements)
    return numpy.arange(begin, end, dtype=numpy.int32)


def sample_ids(arrays, split: str) -> list:
    """The sample numbers recorded for ``split`` in a golden .npz."""
    prefix = f"{split}.sample"
    return sorted(
        {
            int(k.split(".")[1][len("sample") :])
            for k in arrays.files
            if k.startswith(prefix) and not k.startswith(f"{split}.sample_")
        }
    )


def write_corpus(prefix, lengths, seed=0, eod=2, vocab=32000, dtype=numpy.uint16):
    """A real .bin/.idx corpus of documents of ``lengths`` tokens, each ending with EOD."""
    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(seed)
    documents = [rng.integers(3, vocab, length) for length in lengths]  # one draw each
    for tokens in documents:
        tokens[-1] = eod
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    if documents:  # the bytes of add_item + end_document per document, in one call
        builder.add_flat_documents(numpy.concatenate(documents), [len(d) for d in documents])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def write_large_corpus(prefix, lengths, seed=0, eod=2, vocab=32000, dtype=numpy.uint16):
    """Like :func:`write_corpus` (other tokens), for many documents: one draw for all."""
    from tokenloom.format import IndexedDatasetBuilder

    lengths = numpy.asarray(lengths, dtype=numpy.int64)
    tokens = numpy.random.default_rng(seed).integers(3, vocab, int(lengths.sum()))
    tokens[numpy.cumsum(lengths) - 1] = eod
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    builder.add_flat_documents(tokens, lengths)
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def small_config(prefix, path_to_cache, **overrides) -> GPTDatasetConfig:
    fields = dict(
        random_seed=5,
        sequence_length=16,
        blend=([str(prefix)], None),
        split="80,10,10",
        tokenizer=dict(TOKENIZER),
        path_to_cache=None if path_to_cache is None else str(path_to_cache),
        **FLAGS,
    )
    fields.update(overrides)
    return GPTDatasetConfig(**fields)
