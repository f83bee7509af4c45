"""``tokenloom preprocess`` on the command line."""

from __future__ import annotations

import json
import os
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
    code = main(["preprocess", "--input", str(jsonl), "--output-prefix", str(prefix),
                 "--tokenizer", "bytes", "--json-keys", "text", "id", "--append-eod",
                 "--no-progress"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    total = sum(len(t.encode()) + 1 for t in texts)
    total += sum(len(str(i)) + 1 for i in range(len(texts)))
    assert lines[-1].startswith(f"done: {2 * len(texts)} documents, {total:,} tokens from "
                                f"{len(texts)} lines in 1 file")
    assert "MB/s" in lines[-1] and "tokens/s" in lines[-1]
    assert any(f"{prefix}_text_document" in line and "uint16" in line for line in lines)
    assert "  skipped: none" in lines
    with IndexedDataset(f"{prefix}_text_document") as dataset:
        decoded = [bytes(numpy.asarray(dataset[i][:-1], dtype=numpy.uint8)).decode()
                   for i in range(len(dataset))]
    assert decoded == texts


def test_bad_line_exits_1_with_file_and_line(tmp_path, jsonl, capsys):
    with open(jsonl, "a") as handle:
        handle.write('{"text": "fine"}\n{"text": }\n')
    args = ["preprocess", "--input", str(jsonl), "--output-prefix", str(tmp_path / "o"),
            "--tokenizer", "bytes", "--no-progress"]
    assert main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"tokenloom preprocess: error: {jsonl}:8: malformed JSON")
    assert "--on-bad-json skip" in error
    assert not list(tmp_path.glob("o_*"))
    assert main(args + ["--on-bad-json", "skip"]) == 0
    assert "skipped: 1 malformed JSON line" in capsys.readouterr().out


def test_missing_input_and_bad_tokenizer_are_errors(tmp_path, capsys):
    assert main(["preprocess", "--input", str(tmp_path / "*.jsonl"), "--output-prefix", "o",
                 "--tokenizer", "bytes"]) == 1
    assert "matches no files" in capsys.readouterr().err
    assert main(["preprocess", "--input", "x", "--output-prefix", "o",
                 "--tokenizer", str(tmp_path / "vocab.txt")]) == 1
    assert "cannot tell what kind of tokenizer" in capsys.readouterr().err


def test_help_documents_the_policies(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["preprocess", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--on-bad-json", "--on-missing-key", "--on-bad-type", "--on-empty",
                   "--workers", "--append-eod", "hf:tokenizer.json", "zstd"):
        assert option in text
    assert "(default fail)" in text and "default skip" in text


def test_entry_point_with_workers_and_a_trained_tokenizer(tmp_path, jsonl, texts):
    from tokenloom.tokenizers.train import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(texts, 500, str(tmp_path / "tok.json"))
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom", "preprocess", "--input", str(jsonl), "--output-prefix",
         str(tmp_path / "w2"), "--tokenizer", f"hf:{tmp_path / 'tok.json'}", "--append-eod",
         "--workers", "2", "--chunk-mb", "0.01"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 workers" in done.stdout.splitlines()[-1]
    with IndexedDataset(str(tmp_path / "w2_text_document")) as dataset:
        assert [tokenizer.decode(dataset[i][:-1]) for i in range(len(dataset))] == texts
