"""``tokenloom preprocess`` on the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy
import pytest

from tokenloom.cli.main import main
from tokenloom.format import IndexedDataset
from tokenloom.preprocess.stdlib_corpus import stdlib_sources


@pytest.fixture(autouse=True)
def _single_threaded_hf(monkeypatch):
    # the command sets this default for its process; keep the test process unchanged
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="module")
def texts() -> list:
    return [text for _, text in stdlib_sources(max_files=6) if text]


@pytest.fixture
def jsonl(tmp_path, texts):
    path = tmp_path / "in.jsonl"
    records = [{"text": text, "id": str(i)} for i, text in enumerate(texts)]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_writes_outputs_and_prints_the_summary(tmp_path, jsonl, texts, capsys):
    prefix = tmp_path / "out" / "corpus"
    code = main(
        [
            "preprocess",
            "--input",
            str(jsonl),
            "--output-prefix",
            str(prefix),
            "--tokenizer",
            "bytes",
            "--json-keys",
            "text",
            "id",
            "--append-eod",
            "--no-progress",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    total = sum(len(t.encode()) + 1 for t in texts)
    total += sum(len(str(i)) + 1 for i in range(len(texts)))
    assert lines[-1].startswith(
        f"done: {2 * len(texts)} documents, {total:,} tokens from {len(texts)} lines in 1 file"
    )
    rate = re.search(r"\((\d+(?:\.\d+)?) (B|kB|MB|GB)/s, [\d,]+ tokens/s", lines[-1])
    assert rate and float(rate[1]) >= 1, lines[-1]  # a small input is not "0.0 MB/s"
    assert any(f"{prefix}_text_document" in line and "uint16" in line for line in lines)
    assert "  skipped: none" in lines
    with IndexedDataset(f"{prefix}_text_document") as dataset:
        decoded = [
            bytes(numpy.asarray(dataset[i][:-1], dtype=numpy.uint8)).decode()
            for i in range(len(dataset))
        ]
    assert decoded == texts


def test_bad_line_exits_1_with_file_and_line(tmp_path, jsonl, capsys):
    with open(jsonl, "a") as handle:
        handle.write('{"text": "fine"}\n{"text": }\n')
    args = [
        "preprocess",
        "--input",
        str(jsonl),
        "--output-prefix",
        str(tmp_path / "o"),
        "--tokenizer",
        "bytes",
        "--no-progress",
    ]
    assert main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"tokenloom preprocess: error: {jsonl}:8: malformed JSON")
    assert "--on-bad-json skip" in error
    assert not list(tmp_path.glob("o_*"))
    assert main(args + ["--on-bad-json", "skip"]) == 0
    assert "skipped: 1 malformed JSON line" in capsys.readouterr().out


def test_missing_input_and_bad_tokenizer_are_errors(tmp_path, capsys):
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(tmp_path / "*.jsonl"),
                "--output-prefix",
                "o",
                "--tokenizer",
                "bytes",
            ]
        )
        == 1
    )
    assert "matches no files" in capsys.readouterr().err
    assert (
        main(
            [
                "preprocess",
                "--input",
                "x",
                "--output-prefix",
                "o",
                "--tokenizer",
                str(tmp_path / "vocab.txt"),
            ]
        )
        == 1
    )
    assert "cannot tell what kind of tokenizer" in capsys.readouterr().err


def test_help_documents_the_policies(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--on-bad-json",
        "--on-missing-key",
        "--on-bad-type",
        "--on-empty",
        "--workers",
        "--append-eod",
        "hf:tokenizer.json",
        "zstd",
    ):
        assert option in text
    assert "(default fail)" in text and "default skip" in text


@pytest.mark.processes
def test_entry_point_with_workers_and_a_trained_tokenizer(tmp_path, jsonl, texts):
    from tokenloom.tokenizers.train import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(texts, 500, str(tmp_path / "tok.json"))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tokenloom",
            "preprocess",
            "--input",
            str(jsonl),
            "--output-prefix",
            str(tmp_path / "w2"),
            "--tokenizer",
            f"hf:{tmp_path / 'tok.json'}",
            "--append-eod",
            "--workers",
            "2",
            "--chunk-mb",
            "0.01",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "2 workers" in done.stdout.splitlines()[-1]
    with IndexedDataset(str(tmp_path / "w2_text_document")) as dataset:
        assert [tokenizer.decode(dataset[i][:-1]) for i in range(len(dataset))] == texts


GOLDEN = os.path.dirname(os.path.abspath(__file__)) + "/../../../shared/golden/megatron-preprocess"
requires_golden = pytest.mark.skipif(
    not os.path.isfile(os.path.join(GOLDEN, "manifest.json")),
    reason=f"golden set not found at {GOLDEN}",
)


@pytest.mark.parametrize(
    "typo, suggestion",
    [
        ("--tokeniser-type", "--tokenizer-type"),
        ("--append-eos", "--append-eod"),
        ("--jsonkeys", "--json-keys"),
        ("--keep-sequentail-samples", "--keep-sequential-samples"),
    ],
)
def test_a_mistyped_flag_gets_did_you_mean(typo, suggestion, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "preprocess",
                "--input",
                "x",
                "--output-prefix",
                "o",
                "--tokenizer",
                "bytes",
                typo,
                "1",
            ]
        )
    assert exit_info.value.code == 2
    assert f"unrecognized argument {typo}; did you mean {suggestion}?" in capsys.readouterr().err


def test_a_mistyped_tokenizer_type_gets_did_you_mean(tmp_path, jsonl, capsys):
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(jsonl),
                "--output-prefix",
                str(tmp_path / "o"),
                "--tokenizer-type",
                "HuggingFaceTokenzier",
                "--tokenizer-model",
                "m",
            ]
        )
        == 1
    )
    assert "did you mean HuggingFaceTokenizer?" in capsys.readouterr().err


def test_both_or_neither_tokenizer_form_is_an_error(tmp_path, jsonl, capsys):
    base = ["preprocess", "--input", str(jsonl), "--output-prefix", str(tmp_path / "o")]
    assert main(base) == 1
    assert "give the tokenizer once" in capsys.readouterr().err
    assert main(base + ["--tokenizer", "bytes", "--tokenizer-type", "GPT2BPETokenizer"]) == 1
    assert "give the tokenizer once" in capsys.readouterr().err


@requires_golden
def test_gpt2_vocab_json_as_tokenizer_hints_at_merge_file(tmp_path, capsys):
    vocab = os.path.join(GOLDEN, "tokenizers", "gpt2_bpe", "vocab.json")
    args = [
        "preprocess",
        "--input",
        os.path.join(GOLDEN, "inputs", "corpus.jsonl"),
        "--output-prefix",
        str(tmp_path / "g"),
        "--tokenizer",
        vocab,
        "--append-eod",
        "--no-progress",
    ]
    assert main(args) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "pass its merges.txt" in error
    assert "--merge-file" in error
    merges = os.path.join(GOLDEN, "tokenizers", "gpt2_bpe", "merges.txt")
    assert main(args + ["--merge-file", merges]) == 0
    for ext in ("bin", "idx"):  # Megatron's GPT2BPETokenizer bytes (case_29)
        with (
            open(tmp_path / f"g_text_document.{ext}", "rb") as ours,
            open(os.path.join(GOLDEN, "outputs", f"case_29_text_document.{ext}"), "rb") as ref,
        ):
            assert ours.read() == ref.read()


def _readme_megatron_command() -> list:
    """The Megatron command line quoted in docs/preprocessing.md (between the markers)."""
    docs = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "preprocessing.md"
    )
    with open(docs, encoding="utf-8") as handle:
        text = handle.read()
    block = text.split("<!-- megatron-command -->")[1].split("```")[1]
    line = " ".join(part.strip().rstrip("\\") for part in block.strip().splitlines())
    words = line.split()
    assert words[:2] == ["python", "tools/preprocess_data.py"], words
    return words[2:]


@requires_golden
@pytest.mark.timeout(300)
@pytest.mark.processes
def test_the_readme_megatron_command_runs_unchanged(tmp_path):
    """The docs' Megatron command, run as ``tokenloom preprocess ARGS``, writes Megatron's bytes."""
    for name in ("inputs", "tokenizers"):
        os.symlink(os.path.join(GOLDEN, name), tmp_path / name)
    (tmp_path / "outputs").mkdir()
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom", "preprocess", *_readme_megatron_command()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]  # byte-identical to Megatron's: no difference named
    assert first.endswith("; settings: as Megatron-LM"), first
    assert "(post-processor adds [1] to every document)" in first  # what it adds, told apart
    for ext in ("bin", "idx"):  # case_06: hf_bos, --append-eod, text, 2 workers
        assert (tmp_path / "outputs" / f"llama_text_document.{ext}").read_bytes() == open(
            os.path.join(GOLDEN, "outputs", f"case_06_text_document.{ext}"), "rb"
        ).read()


def test_split_sentences_without_punkt_says_how_to_provide_it(tmp_path, jsonl, capsys):
    code = main(
        [
            "preprocess",
            "--input",
            str(jsonl),
            "--output-prefix",
            str(tmp_path / "s"),
            "--tokenizer",
            "bytes",
            "--split-sentences",
            "--punkt-path",
            str(tmp_path),
        ]
    )
    error = capsys.readouterr().err.strip()
    assert code == 1 and len(error.splitlines()) == 1
    assert "punkt" in error and "--punkt-path" in error and "--split-sentences-rules" in error


def test_rule_sentence_splitting_writes_sentence_outputs(tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": "Dr. Who came. He left! Why?"}) + "\n")
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(path),
                "--output-prefix",
                str(tmp_path / "s"),
                "--tokenizer",
                "bytes",
                "--split-sentences-rules",
                "--append-eod",
                "--no-progress",
                "--log-interval",
                "1",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "sentences split by rules" in captured.out.splitlines()[0]
    assert "Processed 1 records" in captured.err
    with IndexedDataset(str(tmp_path / "s_text_sentence")) as dataset:
        sentences = [
            bytes(
                numpy.asarray(dataset[i], dtype=numpy.uint8)[
                    : len(dataset[i]) - (i == len(dataset) - 1)
                ]
            ).decode()
            for i in range(len(dataset))
        ]
        assert dataset.document_indices.tolist() == [0, 3]
    assert sentences == ["Dr. Who came.", "He left!", "Why?"]
