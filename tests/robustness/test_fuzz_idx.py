"""Fuzz: crafted, structurally valid but semantically wrong .idx files never crash,
hang or serve data other than what the index names (seeded, bounded: ~20 s in CI).

The cases run in a subprocess so that a segmentation fault or SIGBUS fails the test
(naming the case) instead of killing pytest.  TOKENLOOM_FUZZ_SECONDS runs it longer."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.fuzz import SECONDS, outcomes, run_fuzz_worker

WORKER = Path(__file__).with_name("_fuzz_idx_worker.py")


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 100)
@pytest.mark.parametrize("seed", [20261201])
def test_crafted_indexes_never_crash_hang_or_lie(tmp_path, seed):
    counts = outcomes(run_fuzz_worker(WORKER, seed, tmp_path))
    assert counts["error"] >= 20 and counts["ok"] >= 5, counts  # both paths exercised
