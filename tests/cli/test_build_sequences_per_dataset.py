"""`tokenloom build-sequences-per-dataset` on the golden corpora and on fresh files."""

from __future__ import annotations

import json
import shutil

import numpy
import pytest

from tokenloom.cli.main import main

# (documents, sequences) of the golden corpora: one sequence per document
CORPORA = {"c0": 300, "c1": 120, "c2": 60}


@pytest.fixture
def corpora(golden_dir, tmp_path):
    """Copies of the golden corpora under tmp_path (the command never writes next to them)."""
    for name in CORPORA:
        for ext in (".bin", ".idx"):
            shutil.copy(golden_dir / "corpora" / f"{name}{ext}", tmp_path / f"{name}{ext}")
    return tmp_path


def _run(*argv):
    return main(["build-sequences-per-dataset", "--no-progress", *map(str, argv)])


def test_bare_prefixes(corpora, capsys):
    out = corpora / "seqs.json"
    assert _run(corpora / "c0", corpora / "c1", "-o", out) == 0
    got = json.loads(out.read_text())
    assert got == {str(corpora / "c0"): [300, 301], str(corpora / "c1"): [120, 121]}
    assert "2 prefixes, 420 sequences" in capsys.readouterr().out


def test_weighted_data_path_and_duplicates(corpora):
    out = corpora / "sub" / "seqs.json"
    c0, c2 = corpora / "c0", corpora / "c2"
    assert _run("--data-path", "0.3", c2, "0.5", c0, "0.2", c2, "-o", out) == 0
    got = json.loads(out.read_text())
    assert list(got) == [str(c2), str(c0)]  # first-appearance order, no duplicates
    assert got[str(c2)] == [60, 61]


def test_per_split_file(corpora):
    blend = corpora / "blend.json"
    blend.write_text(
        json.dumps(
            {
                "train": ["0.7", str(corpora / "c0"), "0.3", str(corpora / "c1")],
                "valid": [str(corpora / "c2")],
                "test": None,
            }
        )
    )
    out = corpora / "seqs.json"
    assert _run("--per-split-data-args-path", blend, "--output", out) == 0
    got = json.loads(out.read_text())
    assert {k.rsplit("/", 1)[1]: v for k, v in got.items()} == {
        "c0": [300, 301],
        "c1": [120, 121],
        "c2": [60, 61],
    }


def test_multi_sequence_documents_count_sequences_not_documents(tmp_path):
    from tokenloom.format import IndexedDatasetBuilder

    prefix = tmp_path / "multi"
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=numpy.int32)
    builder.add_document(numpy.arange(10, dtype=numpy.int32), [3, 3, 4])
    builder.add_document(numpy.arange(4, dtype=numpy.int32), [4])
    builder.finalize(str(prefix) + ".idx")
    out = tmp_path / "seqs.json"
    assert _run(prefix, "-o", out) == 0
    assert json.loads(out.read_text()) == {str(prefix): [4, 3]}


def test_config_reads_the_file(corpora):
    from tokenloom.datasets.utils import load_sequences_per_dataset

    out = corpora / "seqs.json"
    assert _run(corpora / "c1", "-o", out) == 0
    assert load_sequences_per_dataset(str(out)) == {str(corpora / "c1"): (120, 121)}


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "exactly one form"),
        (["a", "--data-path", "b"], "exactly one form"),
        (["missing/prefix"], "missing/prefix.idx"),
    ],
)
def test_errors_are_clear_and_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "seqs.json"
    assert _run(*argv, "-o", out) == 1
    err = capsys.readouterr().err
    assert err.startswith("tokenloom build-sequences-per-dataset: error:") and message in err
    assert not out.exists()


def test_not_an_index_file(tmp_path, capsys):
    (tmp_path / "junk.idx").write_bytes(b"not an index at all, definitely not" * 2)
    assert _run(tmp_path / "junk", "-o", tmp_path / "x.json") == 1
    assert "MMIDIDX" in capsys.readouterr().err


def test_help_teaches(capsys):
    with pytest.raises(SystemExit):
        main(["build-sequences-per-dataset", "--help"])
    text = capsys.readouterr().out
    for needle in ("--per-split-data-args-path", "sequence_count", "example", "--data-path"):
        assert needle in text
