"""Helpers for the format tests: small real datasets written with the builder."""

from __future__ import annotations

import numpy

from tokenloom.format import IndexedDatasetBuilder


def write_dataset(prefix, documents, dtype=numpy.uint16, multimodal=False):
    """Write ``documents`` (list of lists of token lists; or (tokens, mode) pairs)."""
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype, multimodal=multimodal)
    for document in documents:
        for sequence in document:
            if multimodal:
                builder.add_item(sequence[0], sequence[1])
            else:
                builder.add_item(sequence)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def random_documents(seed=0, num_documents=20, max_sequences=3, vocab=1000):
    """Reproducible documents of 1..max_sequences sequences of 0..50 tokens."""
    rng = numpy.random.default_rng(seed)
    return [
        [
            rng.integers(0, vocab, rng.integers(0, 50)).tolist()
            for _ in range(rng.integers(1, max_sequences + 1))
        ]
        for _ in range(num_documents)
    ]
