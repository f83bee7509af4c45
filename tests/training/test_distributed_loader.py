"""Real gloo groups (DP = 2 and 4): each rank's loader yields Megatron's golden indices,
also when it is stopped halfway, its state gathered over gloo, and a fresh loader resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import distributed_harness as harness
from tests.training._golden import samplers

SCRIPT = str(Path(__file__).with_name("_dist_worker.py"))


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("world", [2, 4])
def test_ranks_see_golden_indices_across_a_restart(tmp_path: Path, world: int) -> None:
    samplers()  # skips when the golden folder is missing
    results = harness.launch(SCRIPT, "golden", tmp_path, world, timeout=200)
    ids = set(results[0]["results"])
    assert len(ids) >= 4
    for rank, result in enumerate(results):
        assert set(result["results"]) == ids
        assert all(result["results"].values()), (rank, result)
