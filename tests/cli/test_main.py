"""tokenloom.cli.main: how the command line ends (a reader that closes the pipe early)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[3] / "shared" / "golden" / "megatron-core-0.16.1"
PAIR = GOLDEN / "corpora" / "c0"


@pytest.mark.timeout(120)
def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``tokenloom inspect ... | head -1``: exit 141 as a SIGPIPE death, no error line."""
    if not PAIR.with_suffix(".idx").exists():
        pytest.skip(f"golden pair {PAIR} is missing")
    command = [sys.executable, "-m", "tokenloom", "inspect", str(PAIR)]
    process = subprocess.Popen(
        [*command, "--show", "1000", "--show-tokens", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # the reader goes away with more than a pipe buffer unread
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, stderr
    assert first.startswith(b"prefix:")
    assert "Broken pipe" not in stderr and "Traceback" not in stderr, stderr
