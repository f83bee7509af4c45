"""Merging an empty multimodal dataset (zero sequences) works, as in megatron-core."""

from __future__ import annotations

import numpy

from tokenloom.format import IndexedDataset, IndexedDatasetBuilder


def _write(prefix, sequences, multimodal=True):
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16, multimodal=multimodal)
    for tokens, mode in sequences:
        builder.add_item(tokens, mode)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def test_empty_multimodal_dataset_merges_with_add_index(tmp_path):
    empty = _write(tmp_path / "empty", [])
    full = _write(tmp_path / "full", [([1, 2], 3), ([4], 5)])
    merged = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=numpy.uint16, multimodal=True)
    for prefix in (empty, full, empty):
        merged.add_index(prefix)
    merged.finalize(str(tmp_path / "m.idx"))
    with IndexedDataset(str(tmp_path / "m"), multimodal=True) as dataset:
        assert [(t.tolist(), int(m)) for t, m in dataset] == [([1, 2], 3), ([4], 5)]
    only_empty = IndexedDatasetBuilder(str(tmp_path / "e.bin"), dtype=numpy.uint16, multimodal=True)
    only_empty.add_index(empty)
    only_empty.finalize(str(tmp_path / "e.idx"))
    assert (tmp_path / "e.idx").read_bytes() == (tmp_path / "empty.idx").read_bytes()
