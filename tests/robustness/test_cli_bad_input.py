"""Every subcommand with bad arguments or bad files: exit 1/2 and a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy
import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.cli.main import main


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.jsonl").write_text('{"text": "hello world"}\n{"text": "more"}\n')
    (tmp_path / "garbage.bin").write_bytes(
        bytes(numpy.random.default_rng(0).integers(128, 256, 600, dtype=numpy.uint8))
    )
    (tmp_path / "empty.jsonl").write_text("")
    write_corpus(tmp_path / "corpus", [20] * 10)
    return tmp_path


CASES = [
    "preprocess --input good.jsonl --output-prefix good.jsonl/out --tokenizer bytes",
    "preprocess --input garbage.bin --output-prefix o1 --tokenizer bytes",
    "preprocess --input nope.jsonl --output-prefix o2 --tokenizer bytes",
    "preprocess --input nomatch*.jsonl --output-prefix o3 --tokenizer bytes",
    "preprocess --input good.jsonl --output-prefix o4 --tokenizer hf:garbage.bin",
    "preprocess --input good.jsonl --output-prefix o5 --tokenizer tiktoken:garbage.bin",
    "preprocess --input good.jsonl --output-prefix o6 --tokenizer sentencepiece:garbage.bin",
    "merge --output-prefix good.jsonl/merged corpus",
    "merge --output-prefix m2 corpus garbage",
    "inspect corpus --vocab-size 0",
    "inspect garbage",
    "build-sequences-per-dataset --data-path corpus -o good.jsonl/counts.json",
    "build-sequences-per-dataset -o s.json --data-args-path garbage.bin",
    "build-sequences-per-dataset -o s.json --per-split-data-args-path garbage.bin",
    "prepare-cache --config garbage.bin",
    "prepare-cache --config good.jsonl",
    "prepare-cache --per-split-data-args-path garbage.bin --seq-length 16",
]


@pytest.mark.parametrize("command", CASES)
def test_bad_input_gives_exit_1_and_one_error_line(workdir, capsys, command):
    assert main(command.split()) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error message"
    assert err[-1].startswith(f"tokenloom {command.split()[0]}: error: ")
    assert not any("Traceback" in line for line in err)


def test_empty_input_writes_an_empty_but_valid_pair(workdir):
    assert main("preprocess --input empty.jsonl --output-prefix e --tokenizer bytes".split()) == 0
    assert main(["inspect", "e_text_document"]) == 0


@pytest.mark.parametrize(
    "argv, code",
    [
        (
            [
                "preprocess",
                "--input",
                "garbage.bin",
                "--output-prefix",
                "x",
                "--tokenizer",
                "bytes",
            ],
            1,
        ),
        (["prepare-cache", "--config", "garbage.bin"], 1),
        (["merge", "--output-prefix", "m"], 2),
    ],
)
@pytest.mark.timeout(60)
@pytest.mark.processes
def test_real_process_exit_codes_without_traceback(workdir, argv, code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom", *argv],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=50,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("tokenloom")
