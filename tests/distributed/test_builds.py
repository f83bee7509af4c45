"""The builder on real gloo process groups: rank 0 builds, the others load the same samples.

Also the worker script: ``python test_distributed_builder.py <scenario> <out_dir>``.
Builds are counted by logging every ``IndexCache.store`` call (rank, class) to a file.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy
import pytest
from tests.support import distributed_harness as harness
from tests.support import golden_builds as golden_helpers
from tests.support.golden import GOLDEN_DIR, golden_cases, requires_golden

from tokenloom.cache import IndexCache

WORLD = 3


# --------------------------------------------------------------------------- worker side
_LOG = {}


def _count_stores(log: Path, rank: int) -> None:
    """Log every cache store of this rank to ``log`` (switch files by calling again)."""
    from tokenloom.cache import IndexCache

    _LOG["path"] = log
    if "original" in _LOG:
        return
    original = _LOG["original"] = IndexCache.store

    def store(self, key, arrays, checks=None):
        with open(_LOG["path"], "a") as handle:
            handle.write(f"{rank} {key.class_name}\n")
        return original(self, key, arrays, checks)

    IndexCache.store = store


def _digest(datasets, golden) -> dict:
    """md5 of every golden-named array computed on this rank, and the mismatches."""
    digests, mismatches = {}, []
    for name in golden.files:
        array = numpy.asarray(golden_helpers.lookup(datasets, name))
        digests[name] = hashlib.md5(array.dtype.str.encode() + array.tobytes()).hexdigest()
        want = golden[name]
        if array.dtype != want.dtype or not numpy.array_equal(array, want):
            mismatches.append(name)
    return {"digests": digests, "mismatches": mismatches}


def _build(case_name: str, cache: Path, built_on_rank=lambda: True, **overrides):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    case = next(c for c in golden_cases("datasets") if c["name"] == case_name)
    config = golden_helpers.make_config(case, GOLDEN_DIR, cache, **overrides)
    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, case["sizes"], built_on_rank, config
    ).build()
    return datasets, numpy.load(GOLDEN_DIR / case["arrays"])


def _checked(case_name, cache, **kwargs):
    def run():
        datasets, golden = _build(case_name, cache, **kwargs)
        if all(d is None for d in datasets):
            return None
        return _digest(datasets, golden)

    return harness.outcome(run)


def worker(scenario: str, out_dir: str) -> None:
    rank, _ = harness.init_worker()
    out = Path(out_dir)
    result = {}
    if scenario == "shared":
        _count_stores(out / "stores-shared.log", rank)
        rank0_path = dict(build_on_all_ranks=False)  # this scenario checks the rank-0 path
        result["weighted"] = _checked("blend_weighted", out / "cache", **rank0_path)
        result["per_split"] = _checked("blend_per_split", out / "cache", **rank0_path)
        _count_stores(out / "stores-fast.log", rank)
        result["fast"] = _checked("blend_per_split", out / "cache", fast_cache_load=True)
        _count_stores(out / "stores-other.log", rank)
        result["not_built"] = _checked(
            "blend_exhaustive", out / "cache2", built_on_rank=lambda: rank != 1, **rank0_path
        )
        _count_stores(out / "stores-spread.log", rank)
        result["spread"] = _checked("blend_weighted", out / "cache3")  # build_on_all_ranks
        _count_stores(out / "stores-fails.log", rank)
        blocker = out / "not-a-directory"
        blocker.touch()
        result["rank0_fails"] = _checked("blend_unweighted_sized", blocker / "cache", **rank0_path)
    else:  # node-local caches: every rank its own directory (LOCAL_RANK=0 everywhere)
        _count_stores(out / "stores-local.log", rank)
        result["weighted"] = _checked("blend_weighted", out / f"local{rank}")
    import torch.distributed as dist

    dist.destroy_process_group()
    harness.write_result(out_dir, rank, result)


# --------------------------------------------------------------------------- tests
def _stores(path: Path):
    lines = path.read_text().split("\n") if path.exists() else []
    return [tuple(line.split()) for line in lines if line]


pytestmark = [pytest.mark.distributed, pytest.mark.slow, requires_golden]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    out = tmp_path_factory.mktemp("builder-shared")
    return out, harness.launch(__file__, "shared", out, WORLD, timeout=300)


def test_every_rank_gets_the_golden_samples_and_only_rank0_builds(shared):
    out, results = shared
    for name in ("weighted", "per_split", "fast"):
        outcomes = [r[name] for r in results]
        assert all(o["ok"] for o in outcomes), outcomes
        assert all(o["value"]["mismatches"] == [] for o in outcomes)
        assert len({str(o["value"]["digests"]) for o in outcomes}) == 1
    stores = _stores(out / "stores-shared.log")
    assert stores and {rank for rank, _ in stores} == {"0"}
    # blend_weighted: 3 prefixes x 3 splits + 3 blends; per_split: 2 + 1 + 2 GPT, 2 blends
    assert len([s for s in stores if s[1] == "GPTDataset"]) == 9 + 5
    assert len([s for s in stores if s[1] == "BlendedDataset"]) == 3 + 2
    assert _stores(out / "stores-fast.log") == []  # fast_cache_load only loads


def test_with_build_on_all_ranks_every_rank_builds_a_share_of_the_golden_samples(shared):
    out, results = shared
    outcomes = [r["spread"] for r in results]
    assert all(o["ok"] and o["value"]["mismatches"] == [] for o in outcomes), outcomes
    gpt = [rank for rank, cls in _stores(out / "stores-spread.log") if cls == "GPTDataset"]
    assert sorted(gpt) == ["0"] * 3 + ["1"] * 3 + ["2"] * 3  # 3 prefixes x 3 splits, 1 each


def test_ranks_not_built_get_none(shared):
    _, results = shared
    assert [r["not_built"]["ok"] for r in results] == [True] * WORLD
    assert results[1]["not_built"]["value"] is None
    assert results[0]["not_built"]["value"]["mismatches"] == []
    assert results[2]["not_built"]["value"] == results[0]["not_built"]["value"]


def test_rank0_failure_raises_on_every_rank_without_hanging(shared):
    _, results = shared
    first = results[0]["rank0_fails"]
    assert first["type"] == "CacheError" and "path_to_cache" in first["message"]
    for r in results[1:]:
        assert r["rank0_fails"]["type"] == "DistributedError"
        assert "rank 0: CacheError" in r["rank0_fails"]["message"]


def test_node_local_caches_are_built_once_per_node(tmp_path):
    results = harness.launch(
        __file__,
        "local",
        tmp_path,
        WORLD,
        local_ranks=[0] * WORLD,
        local_world_sizes=[1] * WORLD,
        timeout=300,
    )
    outcomes = [r["weighted"] for r in results]
    assert all(o["ok"] and o["value"]["mismatches"] == [] for o in outcomes), outcomes
    assert len({str(o["value"]["digests"]) for o in outcomes}) == 1
    stores = _stores(tmp_path / "stores-local.log")
    for rank in map(str, range(WORLD)):
        mine = [cls for r, cls in stores if r == rank]
        assert sorted(mine) == ["BlendedDataset"] * 3 + ["GPTDataset"] * 9, (rank, mine)
    for rank in range(WORLD):  # entry files and pack entries
        assert len(IndexCache(str(tmp_path / f"local{rank}")).stems()) == 12


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
