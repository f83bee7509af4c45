"""Fuzz: crafted, structurally valid but semantically wrong .idx files never crash,
hang or serve data other than what the index names (seeded, bounded: ~20 s in CI).

The cases run in a subprocess so that a segmentation fault or SIGBUS fails the test
(naming the case) instead of killing pytest.  TOKENLOOM_FUZZ_SECONDS runs it longer."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_fuzz_idx_worker.py")
SECONDS = float(os.environ.get("TOKENLOOM_FUZZ_SECONDS", "15"))


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 100)
@pytest.mark.parametrize("seed", [20261201])
def test_crafted_indexes_never_crash_hang_or_lie(tmp_path, seed):
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-X",
                "faulthandler",
                str(WORKER),
                str(seed),
                str(SECONDS),
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=SECONDS + 60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a case hung; last log lines: {_tail(tmp_path)}")
    lines = (tmp_path / "log.txt").read_text().splitlines()
    assert done.returncode == 0, (
        f"the worker crashed ({done.returncode}) at {lines[-1:]}: {done.stderr[-3000:]}"
    )
    bad = [(lines[i - 1], line) for i, line in enumerate(lines) if line.startswith("bad")]
    assert bad == [], bad[:10]
    outcomes = collections.Counter(
        line.split()[0] for line in lines if not line.startswith("start")
    )
    assert outcomes["error"] >= 20 and outcomes["ok"] >= 5, outcomes  # both paths exercised


def _tail(folder: Path) -> list:
    path = folder / "log.txt"
    return path.read_text().splitlines()[-4:] if path.exists() else []
