"""Fuzz: crafted index cache entries (valid CRCs, lying arrays or header) never crash,
hang or serve samples other than a fresh build's (seeded, bounded: ~15 s in CI).

The cases run in a subprocess (tests/support/fuzz.py) so that a segmentation fault fails
the test, naming the case, instead of killing pytest. TOKENLOOM_FUZZ_SECONDS runs it longer."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.fuzz import SECONDS, outcomes, run_fuzz_worker

WORKER = Path(__file__).with_name("_fuzz_cache_worker.py")


@pytest.mark.slow
@pytest.mark.timeout(SECONDS + 120)
@pytest.mark.parametrize("seed", [20261201])
def test_crafted_cache_entries_never_crash_hang_or_lie(tmp_path, seed):
    lines = run_fuzz_worker(WORKER, seed, tmp_path)
    counts = outcomes(lines)
    assert counts["error"] >= 20 and counts["ok"] >= 5, counts  # both paths exercised
    kinds = {line.split()[2] for line in lines if line.startswith("start")}
    assert len(kinds) >= 8, kinds  # most mutation kinds ran
