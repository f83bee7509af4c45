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


# megatron-core 0.16.1's tools/merge_datasets.py main(), which the pip package lacks:
# every file needs its .bin/.idx partner, then the pairs are merged in sorted order
_MERGE_DATASETS = r"""
import json, os, sys
from megatron.core.datasets.indexed_dataset import (
    IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path)

folder, output, multimodal = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
prefixes = set()
for name in os.listdir(folder):
    prefix, ext = os.path.splitext(name)
    if prefix in prefixes or not os.path.isfile(os.path.join(folder, name)):
        continue
    partner = ".bin" if ext == ".idx" else ".idx"
    assert os.path.isfile(os.path.join(folder, prefix) + partner)
    prefixes.add(prefix)
builder = None
for prefix in sorted(prefixes):
    if builder is None:
        dataset = IndexedDataset(os.path.join(folder, prefix), multimodal=multimodal)
        builder = IndexedDatasetBuilder(
            get_bin_path(output), dtype=dataset.index.dtype, multimodal=multimodal)
    builder.add_index(os.path.join(folder, prefix))
builder.finalize(get_idx_path(output))
print(json.dumps(sorted(prefixes)))
"""


def _folder(root, multimodal=False):
    root.mkdir()
    rng = numpy.random.default_rng(5)
    for name in ("shard-10", "shard-2", "Shard-1", "shard.v2_text_document"):
        documents = [
            [list(rng.integers(0, 60000, int(n))) for n in rng.integers(1, 9, rng.integers(1, 3))]
            for _ in range(int(rng.integers(1, 6)))
        ]
        _write(root / name, documents, multimodal=multimodal)
    (root / "nested").mkdir()  # folders are skipped, as merge_datasets.py does
    return root


@pytest.mark.megatron
@pytest.mark.timeout(300)
@pytest.mark.parametrize("multimodal", [False, True], ids=["text", "multimodal"])
def test_input_dir_form_equals_megatron_merge_datasets(tmp_path, capsys, multimodal):
    from tests.support.megatron_core import require_megatron, run_json

    require_megatron()
    folder = _folder(tmp_path / "in", multimodal)
    theirs = tmp_path / "megatron"
    order = run_json(_MERGE_DATASETS, str(folder), str(theirs), "1" if multimodal else "0")
    assert order == ["Shard-1", "shard-10", "shard-2", "shard.v2_text_document"]
    argv = [
        "merge",
        "--no-progress",
        "--input",
        str(folder),
        "--output-prefix",
        str(tmp_path / "o"),
    ]
    assert main(argv + (["--multimodal"] if multimodal else [])) == 0
    assert capsys.readouterr().out.startswith("merged 4 datasets")
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"o{ext}").read_bytes() == theirs.with_suffix(ext).read_bytes()


def test_input_dir_form_order_sidecars_and_stray_files(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder / "b", [[[4], [5, 6]]])
    _write(folder / "a", [[[1, 2]], [[3]]])
    (folder / "notes.txt").write_text("not data")
    out = str(tmp_path / "out")
    assert main(["merge", "--input", str(folder), "--output-prefix", out]) == 0
    assert [s.tolist() for s in IndexedDataset(out)] == [[1, 2], [3], [4], [5, 6]]
    assert "ignored 1 file(s) that are not .bin/.idx pairs: notes.txt" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setup, extra, message",
    [
        ("orphan", [], "a.bin has no a.idx beside it"),
        ("empty", [], "no .bin/.idx pair in the directory"),
        ("missing", [], "the directory does not exist"),
        ("file", [], "not a directory"),
        ("multimodal", [], "pass --multimodal"),
        ("text", ["--multimodal"], "--multimodal was given but the dataset is not multimodal"),
    ],
)
def test_input_dir_form_errors(tmp_path, capsys, setup, extra, message):
    folder = tmp_path / "in"
    if setup != "missing" and setup != "file":
        folder.mkdir()
    if setup == "orphan":
        (folder / "a.bin").write_bytes(b"")
    elif setup == "file":
        folder.write_text("x")
    elif setup in ("multimodal", "text"):
        _write(folder / "a", [[[1, 2]]], multimodal=setup == "multimodal")
    argv = ["merge", "--input", str(folder), "--output-prefix", str(tmp_path / "out"), *extra]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("tokenloom merge: error: ") and message in err
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--inputs", "d", "--output-prefix", "o"],
            "unrecognized argument --inputs; did you mean --input?",
        ),
        (["--output-prefix", "o"], "required: PREFIX (or --input DIR)"),
        (["--input", "d", "--output-prefix", "o", "a"], "give the inputs once"),
        (["--input-dir", "d", "--output-prefix", "o"], "unrecognized argument --input-dir"),
    ],
)
def test_wrong_form_names_both_accepted_forms(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["merge", *argv])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("tokenloom merge: error: ") and message in last
    assert "--output-prefix OUT PREFIX [PREFIX ...]" in last
    assert "--input DIR --output-prefix OUT [--multimodal]" in last
