"""Small random uint16 corpora for blend and builder tests (documents end with EOD)."""

from __future__ import annotations

import numpy

from tokenloom.format import IndexedDatasetBuilder

EOD = 2


def write_corpus(prefix, num_docs: int, seed: int) -> str:
    """A uint16 corpus of ``num_docs`` random documents of 5-119 tokens, each ending with EOD."""
    rng = numpy.random.RandomState(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for _ in range(num_docs):
        doc = rng.randint(3, 32000, size=rng.randint(5, 120)).astype(numpy.uint16)
        doc[-1] = EOD
        builder.add_item(doc)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)
