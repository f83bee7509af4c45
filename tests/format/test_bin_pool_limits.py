"""A blend of many prefixes x 3 splits builds and serves under ``ulimit -n 1024``, and
under a simulated mmap quota (``TOKENLOOM_MMAP_QUOTA``: refused mappings are read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tokenloom.format._mapping import QUOTA_VARIABLE

CASES = [
    pytest.param(300, 16, None, marks=pytest.mark.processes, id="300-prefixes"),
    pytest.param(300, 16, 100, marks=pytest.mark.processes, id="300-prefixes-quota-100"),
    pytest.param(10_000, 256, None, marks=pytest.mark.slow, id="10000-prefixes"),
    pytest.param(10_000, 256, 590, marks=pytest.mark.slow, id="10000-prefixes-quota-590"),
]


@pytest.mark.timeout(300)
@pytest.mark.processes
@pytest.mark.parametrize(("prefixes", "pool", "quota"), CASES)
def test_a_blend_of_many_prefixes_serves_within_the_limits(tmp_path, prefixes, pool, quota):
    env = {k: v for k, v in os.environ.items() if k != QUOTA_VARIABLE}
    if quota is not None:
        env[QUOTA_VARIABLE] = str(quota)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.many_prefixes",
            str(tmp_path),
            str(prefixes),
            str(pool),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["limit"] <= 1024
    assert report["datasets"] == 3 * prefixes and report["wrong"] == 0
    assert report["peak_pool"] <= pool and report["peak_fds"] < pool + 64
    if quota is None:
        assert report["refused"] == 0
    else:  # every mapping past the quota refused and read instead, none crashed
        assert report["refused"] > 0 and report["live_maps"] <= quota
        assert done.stderr.count("memory-mapping refused") == 1, done.stderr[-3000:]
