"""`tokenloom merge`: byte-identical to megatron-core's add_index, refuses mismatches."""

from __future__ import annotations

import numpy
import pytest
from tests.support.golden import golden_cases

from tokenloom.cli.main import main
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder

MERGE_CASES = golden_cases("merge")


def _write(prefix, documents, dtype=numpy.uint16, multimodal=False):
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype, multimodal=multimodal)
    for document in documents:
        for sequence in document:
            builder.add_item(sequence, 1) if multimodal else builder.add_item(sequence)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


@pytest.mark.parametrize("case", MERGE_CASES, ids=[case["name"] for case in MERGE_CASES])
def test_golden_merge(case, golden_dir, tmp_path, capsys):
    inputs = [str(golden_dir / source) for source in case["inputs"]]
    out = tmp_path / "merged"
    assert main(["merge", "--no-progress", "--output-prefix", str(out), *inputs]) == 0
    assert out.with_suffix(".bin").read_bytes() == (golden_dir / case["bin"]).read_bytes()
    assert out.with_suffix(".idx").read_bytes() == (golden_dir / case["idx"]).read_bytes()
    summary = capsys.readouterr().out
    assert summary.startswith("merged 2 datasets: 80 sequences, 80 documents, 8300 tokens (uint16)")


def test_glob_style_pairs_and_order(tmp_path, capsys):
    a = _write(tmp_path / "a", [[[1, 2]], [[3]]])
    b = _write(tmp_path / "b", [[[4], [5, 6]]])
    out = str(tmp_path / "out")
    assert main(["merge", "--output-prefix", out, b + ".bin", b + ".idx", a]) == 0
    merged = IndexedDataset(out)
    assert [s.tolist() for s in merged] == [[4], [5, 6], [1, 2], [3]]
    assert merged.document_indices.tolist() == [0, 2, 3, 4]
    assert "merged 2 datasets: 4 sequences, 3 documents, 6 tokens" in capsys.readouterr().out


def test_multimodal_merge(tmp_path):
    a = _write(tmp_path / "a", [[[1, 2]]], multimodal=True)
    out = str(tmp_path / "out")
    assert main(["merge", "--output-prefix", out, a, a]) == 0
    assert IndexedDataset(out, multimodal=True).sequence_modes.tolist() == [1, 1]


def test_refuses_mismatch_and_leaves_no_output(tmp_path, capsys):
    a = _write(tmp_path / "a", [[[1, 2]]])
    wide = _write(tmp_path / "wide", [[[1, 2]]], dtype=numpy.int32)
    mm = _write(tmp_path / "mm", [[[1, 2]]], multimodal=True)
    out = tmp_path / "out"
    assert main(["merge", "--output-prefix", str(out), a, wide]) == 1
    assert "wide.idx: cannot merge: its tokens are int32" in capsys.readouterr().err
    assert main(["merge", "--output-prefix", str(out), a, mm]) == 1
    assert "mm.idx: cannot merge: the dataset is multimodal" in capsys.readouterr().err
    assert main(["merge", "--output-prefix", str(out), a, str(tmp_path / "nope")]) == 1
    assert "nope.idx: index file does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("out", ".out"))) == []


def test_existing_output_needs_overwrite(tmp_path, capsys):
    a = _write(tmp_path / "a", [[[1, 2]]])
    old = _write(tmp_path / "out", [[[9]]])
    assert main(["merge", "--output-prefix", old, a]) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert [s.tolist() for s in IndexedDataset(old)] == [[9]]
    assert main(["merge", "--overwrite", "--output-prefix", old, a, a]) == 0
    assert [s.tolist() for s in IndexedDataset(old)] == [[1, 2], [1, 2]]
