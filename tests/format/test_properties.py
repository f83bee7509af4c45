"""Property tests: any documents round-trip, and every way of adding them writes the same bytes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenloom.format import IndexedDataset, IndexedDatasetBuilder

DTYPES = {
    "uint8": (numpy.uint8, 0, 255),
    "uint16": (numpy.uint16, 0, 65535),
    "int32": (numpy.int32, -(2**31), 2**31 - 1),
    "int64": (numpy.int64, -(2**63), 2**63 - 1),
}


@st.composite
def corpora(draw):
    name = draw(st.sampled_from(sorted(DTYPES)))
    dtype, low, high = DTYPES[name]
    token = st.integers(low, high)
    sequence = st.lists(token, max_size=12)
    documents = draw(st.lists(st.lists(sequence, max_size=4), max_size=8))
    return dtype, documents


def _read_back(prefix):
    dataset = IndexedDataset(prefix)
    return [
        [dataset[i].tolist() for i in range(a, b)]
        for a, b in zip(dataset.document_indices[:-1], dataset.document_indices[1:])
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora())
def test_round_trip_and_equivalent_writers(corpus):
    dtype, documents = corpus
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        items = IndexedDatasetBuilder(folder / "items.bin", dtype=dtype)
        whole = IndexedDatasetBuilder(folder / "whole.bin", dtype=dtype)
        for document in documents:
            for sequence in document:
                items.add_item(numpy.array(sequence, dtype=numpy.int64) if sequence else [])
            items.end_document()
            flat = [t for sequence in document for t in sequence]
            whole.add_document(numpy.array(flat, dtype=dtype), [len(s) for s in document])
        items.finalize(folder / "items.idx")
        whole.finalize(folder / "whole.idx")
        assert _read_back(str(folder / "items")) == documents
        for ext in ("bin", "idx"):
            assert (folder / f"items.{ext}").read_bytes() == (folder / f"whole.{ext}").read_bytes()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 65534), max_size=20), max_size=30),
    st.integers(1, 50),
    st.one_of(st.none(), st.integers(0, 65535)),
)
def test_add_documents_equals_add_item(documents, chunk_size, eod):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        bulk = IndexedDatasetBuilder(folder / "bulk.bin", dtype=numpy.uint16)
        bulk.add_documents(
            [numpy.array(d, dtype=numpy.int64) for d in documents],
            eod_token=eod,
            chunk_size=chunk_size,
        )
        bulk.finalize(folder / "bulk.idx")
        single = IndexedDatasetBuilder(folder / "single.bin", dtype=numpy.uint16)
        for document in documents:
            single.add_item(document + ([eod] if eod is not None else []))
            single.end_document()
        single.finalize(folder / "single.idx")
        for ext in ("bin", "idx"):
            assert (folder / f"bulk.{ext}").read_bytes() == (folder / f"single.{ext}").read_bytes()
