"""Issue 9, item 13: the disk fills up after the ``.bin`` of ``tokenloom preprocess`` was
written, at the ``.idx``, at the provenance sidecar ``.json`` or at the publish journal
(a real 1 MiB tmpfs, filled so that exactly those pages are missing; needs root). Each
time: exit 1, one line, an ``OutputError`` naming that file, nothing published."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.tmpfs import mounted_tmpfs

PAGE = 4096
TMPFS = 1 << 20


def _tokenloom(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenloom", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=120,
    )


def _preprocess(cwd: Path, prefix: str) -> subprocess.CompletedProcess:
    return _tokenloom(
        "preprocess",
        "--input",
        "in.jsonl",
        "--output-prefix",
        prefix,
        "--tokenizer",
        "bytes",
        "--no-progress",
        cwd=cwd,
    )


@pytest.fixture
def tmpfs(tmp_path):
    """A real tmpfs (needs root); unmounted afterwards, also on failure."""
    with mounted_tmpfs(tmp_path / "full", TMPFS) as mount:
        yield mount


def _pages(size: int) -> int:
    return -(-size // PAGE)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fails_at", [".idx", ".json", ".publish-journal"])
@pytest.mark.processes
def test_a_disk_that_fills_after_the_bin_names_the_file(tmp_path, tmpfs, fails_at):
    text = {"text": "all work and no play makes jack a dull boy " * 20}
    (tmp_path / "in.jsonl").write_text((json.dumps(text) + "\n") * 200)
    assert _preprocess(tmp_path, "ref").returncode == 0  # sizes of a normal run
    sizes = {
        suffix: os.path.getsize(tmp_path / f"ref_text_document{suffix}")
        for suffix in (".bin", ".idx", ".json")
    }
    room = _pages(sizes[".bin"]) + {".idx": 0, ".json": 1, ".publish-journal": 2}[fails_at]
    with open(tmpfs / "filler", "wb") as handle:
        handle.write(bytes(TMPFS - room * PAGE))
    result = _preprocess(tmp_path, str(tmpfs / "out"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    named = (
        f"{tmpfs}/out_text_document{fails_at}"
        if fails_at != ".publish-journal"
        else f"{tmpfs}/.out_text_document.publish-journal"
    )
    assert f"{named}: cannot write the output: No space left on device" in lines[0], lines[0]
    assert "disk is full" in lines[0] and "nothing was published" in lines[0]
    left = sorted(name for name in os.listdir(tmpfs) if not name.startswith(".tokenloom-"))
    assert left == ["filler"], left
