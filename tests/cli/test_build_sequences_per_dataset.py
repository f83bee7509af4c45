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


# megatron-core's side of Megatron-LM's tools/build_sequences_per_dataset.py: the counts
# its _IndexReader gives each prefix (the tool itself is not in the megatron-core package)
_MEGATRON_COUNTS = r"""
import json, sys
from megatron.core.datasets.indexed_dataset import _IndexReader
counts = {}
for prefix in json.loads(sys.argv[1]):
    reader = _IndexReader(prefix + ".idx", False)
    counts[prefix] = (reader.sequence_count, reader.document_count)
sys.stdout.write(json.dumps(counts) + "\n")
print(json.dumps(counts))
"""


def _megatron_namespace(**given):
    import argparse

    fields = dict(
        data_path=None,
        train_data_path=None,
        valid_data_path=None,
        test_data_path=None,
        per_split_data_args_path=None,
        data_args_path=None,
    )
    fields.update(given)
    return argparse.Namespace(**fields)


@pytest.mark.megatron
@pytest.mark.timeout(300)
def test_megatron_function_and_file_format(corpora, capsys):
    """Megatron's test_builder.py calls build_sequences_per_dataset(args) with its training
    namespace (integer weights included); the result, the file and the counts are Megatron's."""
    from tests.support.megatron_core import require_megatron, run_json

    from tokenloom.cli.build_sequences_per_dataset import build_sequences_per_dataset

    require_megatron()
    c0, c1, c2 = (str(corpora / name) for name in ("c0", "c1", "c2"))
    args = _megatron_namespace(
        train_data_path=[17, c0, 40, c1], valid_data_path=[c2], test_data_path=[55, c2]
    )
    args.path_to_sequences_per_dataset_json = str(corpora / "unused.json")
    ours = build_sequences_per_dataset(args)
    theirs = run_json(_MEGATRON_COUNTS, json.dumps([c0, c1, c2]))
    assert ours == {prefix: tuple(count) for prefix, count in theirs.items()}
    assert all(isinstance(count, tuple) for count in ours.values())
    blend = corpora / "blend.json"
    blend.write_text(json.dumps({"train": f"0.5 {c0} 0.5 {c1}", "valid": [c2], "test": None}))
    out = corpora / "seqs.json"
    assert _run("--per-split-data-args-path", blend, "--per-dataset-sequences-path", out) == 0
    assert out.read_bytes() == json.dumps(ours).encode()  # what json.dump(result, f) writes


def test_function_result_is_a_sequences_per_dataset(corpora):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.cli.build_sequences_per_dataset import build_sequences_per_dataset
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig

    prefixes = [str(corpora / name) for name in CORPORA]
    counts = build_sequences_per_dataset(_megatron_namespace(data_path=prefixes))
    fields = dict(
        random_seed=1234,
        sequence_length=16,
        blend=(prefixes, None),
        split="70,20,10",
        path_to_cache=str(corpora / "cache"),
        tokenizer={"vocab_size": 32000, "eod": 2},
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    slow = BlendedMegatronDatasetBuilder(
        GPTDataset, [100, 10, 10], lambda: True, GPTDatasetConfig(**fields)
    ).build()
    fast = BlendedMegatronDatasetBuilder(
        GPTDataset,
        [100, 10, 10],
        lambda: True,
        GPTDatasetConfig(sequences_per_dataset=counts, **fields),
    ).build()
    for a, b in zip(slow, fast):
        assert len(a) == len(b) and numpy.array_equal(a[0]["tokens"], b[0]["tokens"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data-path"], "--data-path names no dataset prefix"),
        (["--train-data-path", "a", "--valid-data-path"], "--valid-data-path names no"),
        (["--data-path", "a", "--train-data-path", "b"], "exactly one form"),
    ],
)
def test_megatron_flags_take_zero_words_like_megatron_but_say_why(tmp_path, capsys, argv, message):
    assert _run(*argv, "--per-dataset-sequences-path", tmp_path / "s.json") == 1
    assert message in capsys.readouterr().err


def test_train_split_only(corpora):
    out = corpora / "seqs.json"
    assert _run("--train-data-path", corpora / "c1", "--per-dataset-sequences-path", out) == 0
    assert json.loads(out.read_text()) == {str(corpora / "c1"): [120, 121]}
