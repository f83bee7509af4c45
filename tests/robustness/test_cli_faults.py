"""The command line under faults: a full disk (a real 1 MiB tmpfs), an output path that
is a directory, a symlink loop: exit 1, one line naming the path, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.tmpfs import mounted_tmpfs


def _tokenloom(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenloom", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=120,
    )


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real tmpfs (needs root); unmounted afterwards, also on failure."""
    with mounted_tmpfs(tmp_path / "full", "1m") as mount:
        yield mount


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_full_disk_names_the_file_and_publishes_nothing(tmp_path, small_tmpfs):
    text = {"text": "all work and no play makes jack a dull boy " * 200}
    (tmp_path / "in.jsonl").write_text((json.dumps(text) + "\n") * 400)  # ~3.5 MB of tokens
    result = _tokenloom(
        "preprocess",
        "--input",
        "in.jsonl",
        "--output-prefix",
        str(small_tmpfs / "out"),
        "--tokenizer",
        "bytes",
        "--no-progress",
        cwd=tmp_path,
    )
    line = _one_line(result)
    assert f"{small_tmpfs}/out_text_document" in line and "No space left on device" in line
    assert "disk is full" in line
    assert [name for name in os.listdir(small_tmpfs) if not name.startswith(".tokenloom-")] == []


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_output_prefix_that_is_a_directory_fails_before_any_work(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"text": "hello"}\n')
    (tmp_path / "out_text_document.bin").mkdir()
    line = _one_line(
        _tokenloom(
            "preprocess",
            "--input",
            "in.jsonl",
            "--output-prefix",
            "out",
            "--tokenizer",
            "bytes",
            "--no-progress",
            cwd=tmp_path,
        )
    )
    assert "out_text_document.bin: the output data file is an existing directory" in line


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_symlink_loop_is_one_line(tmp_path):
    os.symlink(tmp_path / "loop.idx", tmp_path / "loop.idx")
    (tmp_path / "loop.bin").write_bytes(b"")
    line = _one_line(_tokenloom("inspect", "loop", cwd=tmp_path))
    assert "loop.idx" in line and "symbolic links" in line


def test_os_error_lines_always_name_the_file():
    from tokenloom.cli.main import describe_os_error

    error = OSError(28, "No space left on device")
    assert describe_os_error(error) == "[Errno 28] No space left on device"
    named = OSError(28, "No space left on device", "/data/out.bin")
    assert describe_os_error(named) == "/data/out.bin: No space left on device"
