"""tokenloom.cli.main: how the command line ends (a reader that closes the pipe early)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.support.golden import GOLDEN_DIR, requires_golden

PAIR = GOLDEN_DIR / "corpora" / "c0"


@requires_golden
@pytest.mark.timeout(120)
@pytest.mark.processes
def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``tokenloom inspect ... | head -1``: exit 141 as a SIGPIPE death, no error line."""
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
