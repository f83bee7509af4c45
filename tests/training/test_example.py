"""examples/train_tiny.py trains a real torch model through the loader and resumes exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_tiny_runs_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env_path()]), OMP_NUM_THREADS="1"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_tiny.py"),
            "--steps",
            "12",
            "--workdir",
            str(tmp_path),
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=220,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    losses = [
        float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("step")
    ]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    assert "next batches identical: True" in done.stdout


def env_path() -> str:
    return os.environ.get("PYTHONPATH", "")
