"""A line that never ends is refused once it outgrows ``TOKENLOOM_MAX_LINE_BYTES``
(default 1 GiB) with one error naming the file and line, instead of being held whole: a
13 MB gzip member chain that inflates to one 3 GiB line killed preprocess by
MemoryError (or the OOM killer) before."""

from __future__ import annotations

import gzip

import pytest
from tests.support.untrusted_files import one_line_error, run_cli

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import (
    DEFAULT_MAX_LINE_BYTES,
    iter_file_chunks,
    iter_file_range_chunks,
    max_line_bytes,
)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_gzip_bomb_of_one_endless_line_is_one_error_line(tmp_path, monkeypatch):
    piece = gzip.compress(b"a" * (64 << 20), compresslevel=1)  # ~280 KB each
    with open(tmp_path / "bomb.jsonl.gz", "wb") as handle:
        handle.write(gzip.compress(b'{"text": "', compresslevel=1))
        for _ in range(48):  # gzip members concatenate: one 3 GiB line
            handle.write(piece)
    assert (tmp_path / "bomb.jsonl.gz").stat().st_size < 20 << 20
    monkeypatch.setenv("TOKENLOOM_MAX_LINE_BYTES", str(256 << 20))  # the child has 2 GiB
    argv = ["preprocess", "--input", "bomb.jsonl.gz", "--output-prefix", "out"]
    done = run_cli([*argv, "--tokenizer", "bytes", "--no-progress"], tmp_path, timeout=240)
    line = one_line_error(done, "preprocess")
    assert "bomb.jsonl.gz:1: the line is longer than 268435456 bytes" in line
    assert "TOKENLOOM_MAX_LINE_BYTES" in line
    assert not list(tmp_path.glob("out*.bin"))


def _lines(tmp_path, lengths) -> tuple:
    lines = [b"x" * (n - 1) + b"\n" for n in lengths]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    return str(path), lines


def test_lines_up_to_the_limit_pass_and_the_first_longer_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_MAX_LINE_BYTES", "300")
    path, lines = _lines(tmp_path, [10, 299, 40, 5000, 7])
    with pytest.raises(PreprocessError, match=r"in.jsonl:4: the line is longer than 300 bytes"):
        list(iter_file_chunks(path, chunk_bytes=64))
    path, lines = _lines(tmp_path, [10, 299, 40, 7, 250])
    chunks = list(iter_file_chunks(path, chunk_bytes=64))
    assert b"".join(chunk.data for chunk in chunks) == b"".join(lines)


def test_a_byte_range_refuses_a_long_last_line_and_skips_a_long_first_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_MAX_LINE_BYTES", "300")
    path, lines = _lines(tmp_path, [10, 20, 5000, 30])
    with pytest.raises(PreprocessError, match=r"in.jsonl:3: the line is longer than 300"):
        list(iter_file_range_chunks(path, 0, 40, chunk_bytes=64))
    start = 10 + 20 + 100  # inside the long line: it belongs to the range before
    chunks = list(iter_file_range_chunks(path, start, 10 + 20 + 5000 + 30, chunk_bytes=64))
    assert b"".join(chunk.data for chunk in chunks) == lines[3]
    assert chunks[0].first_line == 4


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1.5", str((1 << 40) + 1)])
def test_a_meaningless_limit_is_refused(monkeypatch, text):
    monkeypatch.setenv("TOKENLOOM_MAX_LINE_BYTES", text)
    with pytest.raises(PreprocessError, match="TOKENLOOM_MAX_LINE_BYTES"):
        max_line_bytes()


def test_the_default_limit(monkeypatch):
    monkeypatch.delenv("TOKENLOOM_MAX_LINE_BYTES", raising=False)
    assert max_line_bytes() == DEFAULT_MAX_LINE_BYTES == 1 << 30
