"""Fuzz: crafted index cache entries (valid CRCs, lying arrays or header) never crash,
hang or serve samples other than a fresh build's (seeded, bounded: ~15 s in CI).

The cases run in a subprocess so that a segmentation fault fails the test (naming the
case) instead of killing pytest. TOKENLOOM_FUZZ_SECONDS runs it longer."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_fuzz_cache_worker.py")
SECONDS = float(os.environ.get("TOKENLOOM_FUZZ_SECONDS", "15"))


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 120)
@pytest.mark.parametrize("seed", [20261201])
def test_crafted_cache_entries_never_crash_hang_or_lie(tmp_path, seed):
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
            timeout=SECONDS + 90,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a case hung; last log lines: {_tail(tmp_path)}")
    log = tmp_path / "log.txt"
    lines = log.read_text().splitlines() if log.exists() else []
    assert done.returncode == 0, (
        f"the worker crashed ({done.returncode}) at {lines[-1:]}: {done.stderr[-3000:]}"
    )
    bad = [(lines[i - 1], line) for i, line in enumerate(lines) if line.startswith("bad")]
    assert bad == [], bad[:10]
    kinds = {line.split()[2] for line in lines if line.startswith("start")}
    outcomes = collections.Counter(
        line.split()[0] for line in lines if not line.startswith("start")
    )
    assert outcomes["error"] >= 20 and outcomes["ok"] >= 5, outcomes  # both paths exercised
    assert len(kinds) >= 8, kinds  # most mutation kinds ran


def _tail(folder: Path) -> list:
    path = folder / "log.txt"
    return path.read_text().splitlines()[-4:] if path.exists() else []
