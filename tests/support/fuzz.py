"""Run a seeded, time-bounded fuzz worker in a subprocess and read its log.

A fuzz worker (``tests/robustness/_fuzz_*_worker.py SEED SECONDS FOLDER``) writes one line
per case to ``FOLDER/log.txt``: ``start <n> <kind> ...`` before a case, then ``ok``,
``error`` or ``bad`` after it. Running it in a subprocess turns a segmentation fault or a
SIGBUS into a failed test naming the last case, instead of a dead pytest.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

SECONDS = float(os.environ.get("TOKENLOOM_FUZZ_SECONDS", "15"))


def run_fuzz_worker(worker: Path, seed: int, folder: Path) -> list[str]:
    """The worker's log lines; fails the test on a hang, a crash or a ``bad`` case."""
    command = [sys.executable, "-X", "faulthandler", str(worker), str(seed), str(SECONDS)]
    log = folder / "log.txt"
    try:
        done = subprocess.run(
            [*command, str(folder)], capture_output=True, text=True, timeout=SECONDS + 90
        )
    except subprocess.TimeoutExpired:
        tail = log.read_text().splitlines()[-4:] if log.exists() else []
        pytest.fail(f"a case hung; last log lines: {tail}")
    lines = log.read_text().splitlines() if log.exists() else []
    assert done.returncode == 0, (
        f"the worker crashed ({done.returncode}) at {lines[-1:]}: {done.stderr[-3000:]}"
    )
    bad = [(lines[i - 1], line) for i, line in enumerate(lines) if line.startswith("bad")]
    assert bad == [], bad[:10]
    return lines


def outcomes(lines: list[str]) -> collections.Counter[str]:
    """How many cases ended ``ok`` and ``error``."""
    return collections.Counter(line.split()[0] for line in lines if not line.startswith("start"))
