"""Hostile input gives a tokenloom error naming the file, line and field (issue 9, item 13)."""

from __future__ import annotations

import pytest
from tests.preprocess._preprocess_helpers import write_jsonl

from tokenloom.cli.main import main
from tokenloom.errors import PreprocessError
from tokenloom.preprocess import Policy, preprocess

DEEP = 200_000


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lone_surrogate_names_file_line_and_key(tmp_path, workers):
    path = write_jsonl(tmp_path / "s.jsonl", [{"text": "ok"}, '{"text": "bad \\ud800 here"}'])
    with pytest.raises(
        PreprocessError,
        match=r"s.jsonl:2: key 'text' holds a lone UTF-16 "
        r"surrogate.*--on-bad-json skip",
    ):
        preprocess(str(path), str(tmp_path / "o"), "bytes", workers=workers)
    summary = preprocess(
        str(path), str(tmp_path / "o"), "bytes", workers=workers, policy=Policy(on_bad_json="skip")
    )
    assert summary.skipped == {("bad_json", ""): 1} and summary.documents == 1


def test_a_valid_surrogate_pair_is_text(tmp_path):
    path = write_jsonl(tmp_path / "e.jsonl", ['{"text": "smile \\ud83d\\ude00"}'])
    summary = preprocess(str(path), str(tmp_path / "o"), "bytes")
    assert summary.tokens == len("smile \U0001f600".encode())


@pytest.mark.parametrize(
    "line", ["[" * DEEP + "]" * DEEP, '{"text": ' + "[" * DEEP + "]" * DEEP + "}"]
)
@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_json_nested_200000_deep_is_a_bad_line(tmp_path, line, policy):
    path = write_jsonl(tmp_path / "deep.jsonl", [{"text": "fine"}, line])
    if policy == "fail":
        with pytest.raises(
            PreprocessError,
            match=r"deep.jsonl:2: malformed JSON \(nested too "
            r"deeply",
        ):
            preprocess(str(path), str(tmp_path / "o"), "bytes")
        return
    summary = preprocess(str(path), str(tmp_path / "o"), "bytes", policy=Policy(on_bad_json="skip"))
    assert summary.skipped == {("bad_json", ""): 1} and summary.documents == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_chunk_mb_must_be_a_positive_finite_size(tmp_path, value, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}])
    code = main(
        [
            "preprocess",
            "--input",
            str(path),
            "--output-prefix",
            str(tmp_path / "o"),
            "--tokenizer",
            "bytes",
            "--chunk-mb",
            value,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and f"--chunk-mb {float(value)}" in err
    assert not list(tmp_path.glob("o_*"))


@pytest.mark.parametrize(
    "name, value",
    [("workers", 0), ("partitions", float("nan")), ("chunk_bytes", 0), ("log_interval", -5)],
)
def test_api_counts_must_be_whole_and_positive(tmp_path, name, value):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}])
    with pytest.raises(PreprocessError, match="use a whole number of 1 or more"):
        preprocess(str(path), str(tmp_path / "o"), "bytes", **{name: value})
