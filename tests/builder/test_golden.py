"""BlendedMegatronDatasetBuilder against megatron-core 0.16.1's golden vectors.

Every ``datasets`` case of the manifest is built through the builder with a fresh
``path_to_cache``; every array of the case (lengths, blending indices, each
contributing dataset's document/sample/shuffle index, the sample fields) must equal
the golden one in value and dtype.  A second build then loads everything from the
cache and must give the same arrays again, without building anything.
"""

from __future__ import annotations

import numpy
import pytest
from tests.support.golden import golden_cases
from tests.support.golden_builds import assert_matches_golden, build

from tokenloom.datasets.blended import BlendedDataset

CASES = golden_cases("datasets")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_case_then_cached_rebuild(case, golden_dir, tmp_path, monkeypatch):
    golden = numpy.load(golden_dir / case["arrays"])
    assert_matches_golden(build(case, golden_dir, tmp_path), golden)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files, "nothing was cached"

    # second build: everything comes from the cache, nothing is built again
    from tokenloom.datasets import gpt

    def no_build(*args, **kwargs):
        raise AssertionError("the second build must load from the cache")

    monkeypatch.setattr(gpt.GPTDataset, "_build", no_build)
    monkeypatch.setattr(BlendedDataset, "_build", no_build)
    assert_matches_golden(build(case, golden_dir, tmp_path), golden)
    assert sorted(p.name for p in tmp_path.iterdir()) == files


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["name"] == "blend_weighted"], ids=["blend_weighted"]
)
@pytest.mark.parametrize("threads", [1, 3])
def test_threads_do_not_change_the_result(case, golden_dir, tmp_path, threads):
    golden = numpy.load(golden_dir / case["arrays"])
    datasets = build(case, golden_dir, tmp_path, num_dataset_builder_threads=threads)
    assert_matches_golden(datasets, golden)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["name"] == "blend_per_split"], ids=["blend_per_split"]
)
def test_fast_cache_load_and_deferred_mmap_after_prepare(case, golden_dir, tmp_path):
    golden = numpy.load(golden_dir / case["arrays"])
    build(case, golden_dir, tmp_path)  # prepare the cache
    fast = build(case, golden_dir, tmp_path, fast_cache_load=True)
    assert_matches_golden(fast, golden)
    deferred = build(case, golden_dir, tmp_path, defer_npy_index_mmap=True)
    train = deferred[0]
    assert not train.indices_loaded and len(train) == 300
    assert_matches_golden(deferred, golden)
