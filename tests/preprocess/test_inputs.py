"""Input files: compression by magic bytes, line-aligned chunks, globs."""

from __future__ import annotations

import json
import os
import sys

import pytest
from tests.preprocess._preprocess_helpers import compress, write_jsonl

from tokenloom.errors import PreprocessError
from tokenloom.preprocess import preprocess
from tokenloom.preprocess.inputs import (
    detect_compression,
    expand_inputs,
    iter_chunks,
    iter_file_chunks,
)

COMPRESSIONS = ["none", "gzip", "zstd", "bzip2", "xz"]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_compression_is_detected_and_decoded(tmp_path, corpus_records, compression):
    path = write_jsonl(tmp_path / "data.bin", corpus_records, compression)  # name says nothing
    assert detect_compression(str(path)) == compression
    plain = write_jsonl(tmp_path / "plain.jsonl", corpus_records).read_bytes()
    chunks = list(iter_file_chunks(str(path), chunk_bytes=5000))
    assert b"".join(chunk.data for chunk in chunks) == plain
    assert sum(chunk.disk_bytes for chunk in chunks) == os.path.getsize(path)


def test_chunks_hold_whole_lines_and_know_their_line_numbers(tmp_path, corpus_records):
    path = write_jsonl(tmp_path / "d.jsonl", corpus_records)
    lines = path.read_bytes().split(b"\n")[:-1]
    for chunk_bytes in (1, 100, 7000, 1 << 20):
        seen = []
        for chunk in iter_file_chunks(str(path), chunk_bytes):
            assert chunk.data == b"" or chunk.data.endswith(b"\n")
            got = chunk.data.split(b"\n")[:-1]
            assert got == lines[chunk.first_line - 1 : chunk.first_line - 1 + len(got)]
            seen.extend(got)
        assert seen == lines


def test_last_line_without_newline(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "b"}')
    chunks = list(iter_file_chunks(str(path), chunk_bytes=4))
    assert b"".join(c.data for c in chunks) == path.read_bytes()
    assert chunks[-1].first_line == 2 and chunks[-1].data == b'{"text": "b"}'


def test_globs_and_lists(tmp_path, corpus_records):
    for name in ("b.jsonl", "a.jsonl", "sub/c.jsonl.gz"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        write_jsonl(tmp_path / name, corpus_records[:2])
    found = expand_inputs([str(tmp_path / "*.jsonl"), str(tmp_path / "**" / "*.gz")])
    assert [os.path.relpath(p, tmp_path) for p in found] == ["a.jsonl", "b.jsonl", "sub/c.jsonl.gz"]
    assert expand_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / "a.jsonl")]) == [
        str(tmp_path / "a.jsonl")
    ]
    assert len(list(iter_chunks(found))) == 3


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("*.nothing", "matches no files"),
        ("missing.jsonl", "no such file"),
        (".", "is a directory"),
    ],
)
def test_bad_inputs(tmp_path, pattern, message):
    with pytest.raises(PreprocessError, match=message):
        expand_inputs([str(tmp_path / pattern)])
    with pytest.raises(PreprocessError, match="no input files"):
        expand_inputs([])


@pytest.mark.parametrize("compression", ["gzip", "zstd", "bzip2", "xz"])
@pytest.mark.parametrize("keep", [0.3, 0.5, 0.97])
def test_truncated_compressed_input_fails_naming_the_file(
    tmp_path, corpus_records, compression, keep
):
    """Cut anywhere (mid-line too): 'truncated', never 'malformed JSON' nor a short dataset."""
    path = write_jsonl(tmp_path / f"d.{compression}", corpus_records, compression)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(PreprocessError, match=rf"d\.{compression}: .*truncated") as caught:
        preprocess(str(path), str(tmp_path / "out"), "bytes", show_progress=False)
    assert "malformed" not in str(caught.value)
    assert not list(tmp_path.glob("out*"))


def test_concatenated_zstd_frames_are_all_read(tmp_path, corpus_records):
    whole = b"".join(json.dumps(r).encode() + b"\n" for r in corpus_records)
    half = len(corpus_records) // 2
    parts = [
        b"".join(json.dumps(r).encode() + b"\n" for r in records)
        for records in (corpus_records[:half], corpus_records[half:])
    ]
    path = tmp_path / "two.zst"
    path.write_bytes(compress(parts[0], "zstd") + compress(parts[1], "zstd"))
    assert b"".join(chunk.data for chunk in iter_file_chunks(str(path), 4096)) == whole


def test_corrupt_zstd_is_a_clear_error(tmp_path, corpus_records):
    path = write_jsonl(tmp_path / "d.jsonl.zst", corpus_records, "zstd")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(PreprocessError, match=r"cannot decompress \(zstd\)"):
        list(iter_file_chunks(str(path)))


def test_zstandard_missing_is_explained(tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl.zst"
    path.write_bytes(compress(b'{"text": "a"}\n', "zstd"))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    with pytest.raises(PreprocessError, match=r"zstandard-compressed.*pip install"):
        list(iter_file_chunks(str(path)))
