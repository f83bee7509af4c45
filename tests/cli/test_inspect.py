"""`tokenloom inspect`: report, statistics, integrity check and exit codes."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from tokenloom.cli.main import main
from tokenloom.format import IndexedDatasetBuilder

DOCUMENTS = [[[5, 6, 7], [8]], [[9, 10]], [[11]]]


@pytest.fixture
def prefix(tmp_path):
    builder = IndexedDatasetBuilder(tmp_path / "data.bin", dtype=numpy.uint16)
    for document in DOCUMENTS:
        for sequence in document:
            builder.add_item(sequence)
        builder.end_document()
    builder.finalize(tmp_path / "data.idx")
    return str(tmp_path / "data")


def test_text_report(prefix, capsys):
    assert main(["inspect", prefix, "--show", "2", "--vocab-size", "12"]) == 0
    out = capsys.readouterr().out
    assert "dtype uint16 (code 8), multimodal no" in out
    assert "sequences:  4" in out and "documents:  3" in out and "tokens:     7" in out
    assert "sequence length          min 1  mean 1.75  p50 1.5" in out
    assert "tokens per document      min 1  mean 2.33" in out and "max 4" in out
    assert "[0] (3 tokens) [5, 6, 7]" in out and "[1] (1 tokens) [8]" in out
    assert "[2]" not in out
    assert "integrity:  OK (token ids below 12)" in out


def test_json_report(prefix, capsys):
    assert main(["inspect", prefix, "--json", "--show", "1", "--show-tokens", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["problems"] == []
    assert (report["sequence_count"], report["document_count"], report["token_count"]) == (4, 3, 7)
    assert report["sequence_length"] == pytest.approx(
        {"min": 1, "mean": 1.75, "p50": 1.5, "p99": 2.97, "max": 3}
    )
    assert report["preview"] == [{"sequence": 0, "length": 3, "tokens": [5, 6], "truncated": True}]


def test_golden_multimodal(golden_dir, capsys):
    assert main(["inspect", str(golden_dir / "format" / "u16_multimodal"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["multimodal"] is True and report["sequence_count"] == 80
    assert report["document_count"] == 40 and sum(report["modes"].values()) == 80


def test_token_outside_vocabulary_fails(prefix, capsys):
    assert main(["inspect", prefix, "--vocab-size", "11"]) == 1
    out = capsys.readouterr().out
    assert "integrity:  FAILED" in out
    assert "token 11 at token position 6 is outside the vocabulary 0..10" in out


def test_trailing_bytes_in_bin_fail(prefix, capsys):
    with open(prefix + ".bin", "ab") as handle:
        handle.write(b"\x00\x00")
    assert main(["inspect", prefix]) == 1
    assert "data.bin: 16 bytes, the index describes 14" in capsys.readouterr().out


def test_inconsistent_pointer_fails(prefix, capsys):
    with open(prefix + ".idx", "r+b") as handle:  # pointer of sequence 2: 8 -> 6
        handle.seek(34 + 4 * 4 + 2 * 8)
        handle.write(struct.pack("<q", 6))
    assert main(["inspect", prefix, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert "first at sequence 2: 6 instead of 8" in report["problems"][0]


def test_unreadable_pair_fails(prefix, tmp_path, capsys):
    with open(prefix + ".idx", "r+b") as handle:
        handle.write(b"XXXX")
    assert main(["inspect", prefix]) == 1
    assert "tokenloom inspect: error:" in capsys.readouterr().err
    assert main(["inspect", prefix, "--json"]) == 1
    assert "not an MMIDIDX" in json.loads(capsys.readouterr().out)["problems"][0]
    assert main(["inspect", str(tmp_path / "missing")]) == 1
    assert "missing.idx: index file does not exist" in capsys.readouterr().err


@pytest.mark.processes
def test_console_script(golden_dir, tmp_path):
    script = Path(sys.executable).parent / "tokenloom"
    if not script.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    for ext in (".bin", ".idx"):
        shutil.copy(golden_dir / "format" / f"i32_multiseq{ext}", tmp_path / f"c{ext}")
    result = subprocess.run(
        [str(script), "inspect", str(tmp_path / "c"), "--vocab-size", "2147483647"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "dtype int32 (code 4)" in result.stdout and "sequences:  120" in result.stdout
    with open(tmp_path / "c.bin", "r+b") as handle:
        handle.truncate(100)
    result = subprocess.run(
        [str(script), "inspect", str(tmp_path / "c")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "c.bin: data file is 100 bytes" in result.stderr


@pytest.mark.parametrize(
    "content, why",
    [(b"{not json", "is not valid JSON"), (b'{"format": "other/1"}', "not a tokenloom")],
)
def test_a_present_but_broken_sidecar_is_not_reported_absent(prefix, capsys, content, why):
    Path(f"{prefix}.json").write_bytes(content)
    assert main(["inspect", prefix]) == 0  # the pair is fine: the sidecar is a warning
    out = capsys.readouterr().out
    (headline,) = [line for line in out.splitlines() if line.startswith("provenance:")]
    assert "data.json present but unreadable (" in headline and why in headline
    assert "absent" not in out
    assert f"warning: {prefix}.json:" in out  # the full reason and what to do
    assert main(["inspect", prefix, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["provenance"] is None and why in report["provenance_error"]


def test_an_absent_sidecar_is_reported_absent(prefix, capsys):
    assert main(["inspect", prefix]) == 0
    out = capsys.readouterr().out
    assert "provenance: none (" in out and "data.json absent" in out
