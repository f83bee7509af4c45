"""The ``.idx`` download under a real gloo group: rank 0 first, one download per node
(node-local cache folders), a failure raised on every rank.

This file is also the worker script: ``python test_distributed.py <scenario> <out>``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from tests.support import distributed_harness as harness

pytestmark = [pytest.mark.s3, pytest.mark.distributed]

LOCAL_RANKS, LOCAL_WORLD_SIZES = [0, 1, 0], [2, 2, 1]  # ranks 0,1 on node A, rank 2 on B


def worker(out_dir: str) -> None:
    from tokenloom.builder.remote_indices import fetch_indices_on_rank0_then_others
    from tokenloom.storage import ObjectStorageConfig, RetryPolicy

    rank, _ = harness.init_worker()
    node = "nodeA" if rank < 2 else "nodeB"
    config = ObjectStorageConfig(
        path_to_idx_cache=str(Path(out_dir) / node),
        endpoint_url=os.environ["TL_TEST_ENDPOINT"],
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.01),
    )
    urls = os.environ["TL_TEST_URLS"].split(",")
    result = {"fetch": harness.outcome(lambda: fetch_indices_on_rank0_then_others(urls, config))}
    missing = urls[:1] + [urls[0].replace(".idx", "-missing.idx")]
    result["missing"] = harness.outcome(lambda: fetch_indices_on_rank0_then_others(missing, config))
    import torch.distributed as dist

    dist.destroy_process_group()
    harness.write_result(out_dir, rank, result)


@pytest.mark.timeout(240)
def test_one_download_per_node_and_failures_on_every_rank(s3, tmp_path, monkeypatch):
    urls = [s3.remote["small"] + ".idx", s3.remote["other"] + ".idx"]
    monkeypatch.setenv("TL_TEST_ENDPOINT", s3.proxy.url)
    monkeypatch.setenv("TL_TEST_URLS", ",".join(urls))
    results = harness.launch(
        __file__,
        "storage",
        tmp_path,
        3,
        local_ranks=LOCAL_RANKS,
        local_world_sizes=LOCAL_WORLD_SIZES,
        timeout=200,
    )
    for rank, result in enumerate(results):
        assert result["fetch"]["ok"], result
        node = "nodeA" if rank < 2 else "nodeB"
        assert all(p.startswith(str(tmp_path / node)) for p in result["fetch"]["value"])
    for name in ("small", "other"):
        gets = [r for r in s3.proxy.requests("GET") if r[1].endswith(f"{name}.idx")]
        assert len(gets) == 2, gets  # node A once (rank 0), node B once (rank 2)
        for node in ("nodeA", "nodeB"):
            local = tmp_path / node / "loom-data" / "corpora" / f"{name}.idx"
            assert local.read_bytes() == Path(s3.local[name] + ".idx").read_bytes()
    failed = [r["missing"] for r in results]
    assert not any(f["ok"] for f in failed)
    assert (
        failed[0]["type"] == "ObjectNotFoundError" and "small-missing.idx" in failed[0]["message"]
    )
    assert all(
        f["type"] == "DistributedError" and "small-missing.idx" in f["message"] for f in failed[1:]
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    worker(sys.argv[2])
