"""``tokenloom preprocess --output-prefix s3://...`` and ``tokenloom inspect s3://...``."""

from __future__ import annotations

import json

import numpy
import pytest
from tests.storage.storage_helpers import BUCKET, storage_config

from tokenloom.cli.main import main
from tokenloom.format import IndexedDataset

pytestmark = pytest.mark.s3


def _corpus(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"document {i} " * (i % 7 + 1)}) + "\n" for i in range(40))
    )
    return path


def test_preprocess_to_s3_then_inspect(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("TOKENLOOM_IDX_CACHE", str(tmp_path / "idx"))
    corpus = _corpus(tmp_path)
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(corpus),
                "--output-prefix",
                str(tmp_path / "local" / "c"),
                "--tokenizer",
                "bytes",
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(corpus),
                "--output-prefix",
                f"s3://{BUCKET}/cli/c",
                "--tokenizer",
                "bytes",
                "--no-progress",
            ]
        )
        == 0
    )
    local = IndexedDataset(str(tmp_path / "local" / "c_text_document"))
    remote = IndexedDataset(
        f"s3://{BUCKET}/cli/c_text_document",
        mmap=False,
        object_storage_config=storage_config(tmp_path),
    )
    assert len(remote) == len(local) == 40
    for i in range(len(local)):
        numpy.testing.assert_array_equal(remote[i], local[i])
    assert list((tmp_path / "staging").iterdir()) == []
    capsys.readouterr()
    assert (
        main(["inspect", f"s3://{BUCKET}/cli/c_text_document", "--json", "--vocab-size", "256"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["sequence_count"] == 40
    assert report["bin_bytes"] == local.bin_reader.size
    assert report["idx_path"].startswith(str(tmp_path / "idx"))


def test_inspect_missing_remote_dataset_names_the_url(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENLOOM_IDX_CACHE", str(tmp_path / "idx"))
    assert main(["inspect", f"s3://{BUCKET}/nope/x"]) != 0
    assert f"s3://{BUCKET}/nope/x.idx: object does not exist" in capsys.readouterr().err


def test_failed_preprocess_uploads_nothing(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_STAGING_DIR", str(tmp_path / "staging"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    assert (
        main(
            [
                "preprocess",
                "--input",
                str(bad),
                "--output-prefix",
                f"s3://{BUCKET}/bad/c",
                "--tokenizer",
                "bytes",
                "--no-progress",
            ]
        )
        != 0
    )
    listed = s3.client().list_objects_v2(Bucket=BUCKET, Prefix="bad/")
    assert listed.get("KeyCount", 0) == 0
