"""Byte-for-byte compatibility with the files megatron-core 0.16.1 wrote (golden vectors)."""

from __future__ import annotations

import json

import numpy
import pytest
from tests.support.golden import golden_cases

from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, read_index_header

FORMAT_CASES = golden_cases("format")
MERGE_CASES = golden_cases("merge")


def _ids(cases):
    return [case["name"] for case in cases]


def _documents(golden_dir, case):
    return json.loads((golden_dir / case["documents"]).read_text())


@pytest.mark.parametrize("case", FORMAT_CASES, ids=_ids(FORMAT_CASES))
def test_writer_produces_megatron_bytes(case, golden_dir, tmp_path):
    builder = IndexedDatasetBuilder(
        tmp_path / "out.bin", dtype=getattr(numpy, case["dtype"]), multimodal=case["multimodal"]
    )
    for document in _documents(golden_dir, case):
        for sequence in document:
            builder.add_item(sequence["tokens"], sequence["mode"]) if case[
                "multimodal"
            ] else builder.add_item(sequence["tokens"])
        builder.end_document()
    builder.finalize(tmp_path / "out.idx")
    assert (tmp_path / "out.bin").read_bytes() == (golden_dir / case["bin"]).read_bytes()
    assert (tmp_path / "out.idx").read_bytes() == (golden_dir / case["idx"]).read_bytes()


@pytest.mark.parametrize("case", FORMAT_CASES, ids=_ids(FORMAT_CASES))
def test_add_document_produces_megatron_bytes(case, golden_dir, tmp_path):
    builder = IndexedDatasetBuilder(
        tmp_path / "out.bin", dtype=getattr(numpy, case["dtype"]), multimodal=case["multimodal"]
    )
    for document in _documents(golden_dir, case):
        tokens = [t for sequence in document for t in sequence["tokens"]]
        lengths = [len(sequence["tokens"]) for sequence in document]
        modes = [sequence["mode"] for sequence in document] if case["multimodal"] else None
        builder.add_document(numpy.array(tokens, dtype=numpy.int64), lengths, modes)
    builder.finalize(tmp_path / "out.idx")
    assert (tmp_path / "out.bin").read_bytes() == (golden_dir / case["bin"]).read_bytes()
    assert (tmp_path / "out.idx").read_bytes() == (golden_dir / case["idx"]).read_bytes()


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "file"])
@pytest.mark.parametrize("case", FORMAT_CASES, ids=_ids(FORMAT_CASES))
def test_reader_reads_megatron_files(case, mmap, golden_dir):
    documents = _documents(golden_dir, case)
    sequences = [sequence for document in documents for sequence in document]
    prefix = str(golden_dir / case["bin"])[: -len(".bin")]
    header = read_index_header(prefix + ".idx")
    assert header.dtype is getattr(numpy, case["dtype"])
    assert (header.sequence_count, header.num_documents) == (len(sequences), len(documents))
    with IndexedDataset(prefix, multimodal=case["multimodal"], mmap=mmap) as dataset:
        assert len(dataset) == len(sequences)
        assert dataset.dtype is getattr(numpy, case["dtype"])
        boundaries = numpy.cumsum([0] + [len(document) for document in documents])
        assert dataset.document_indices.tolist() == boundaries.tolist()
        assert dataset.sequence_lengths.tolist() == [len(s["tokens"]) for s in sequences]
        for i, sequence in enumerate(sequences):
            item = dataset[i]
            tokens = item[0] if case["multimodal"] else item
            assert tokens.dtype == dataset.dtype
            assert tokens.tolist() == sequence["tokens"]
            if case["multimodal"]:
                assert int(item[1]) == sequence["mode"]
        if case["multimodal"]:
            assert dataset.sequence_modes.tolist() == [s["mode"] for s in sequences]
        else:
            assert dataset.sequence_modes is None


@pytest.mark.parametrize("case", MERGE_CASES, ids=_ids(MERGE_CASES))
def test_add_index_produces_megatron_merge(case, golden_dir, tmp_path):
    builder = IndexedDatasetBuilder(tmp_path / "merged.bin", dtype=numpy.uint16)
    for source in case["inputs"]:
        builder.add_index(str(golden_dir / source))
    builder.finalize(tmp_path / "merged.idx")
    assert (tmp_path / "merged.bin").read_bytes() == (golden_dir / case["bin"]).read_bytes()
    assert (tmp_path / "merged.idx").read_bytes() == (golden_dir / case["idx"]).read_bytes()


@pytest.mark.parametrize("case", MERGE_CASES, ids=_ids(MERGE_CASES))
def test_reader_reads_megatron_merge(case, golden_dir):
    parts = [IndexedDataset(str(golden_dir / source)) for source in case["inputs"]]
    merged = IndexedDataset(str(golden_dir / case["bin"])[: -len(".bin")])
    expected = [seq.tolist() for part in parts for seq in part]
    assert [seq.tolist() for seq in merged] == expected
    assert len(merged.document_indices) == sum(len(p.document_indices) - 1 for p in parts) + 1
