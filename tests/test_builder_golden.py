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
from tests.conftest import golden_cases

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, MockGPTDataset, SimpleTokenizer
from tokenloom.datasets.blended import BlendedDataset

DEFAULTS = dict(
    random_seed=1234, sequence_length=64, reset_position_ids=False, reset_attention_mask=False,
    eod_mask_loss=False, create_attention_mask=True, add_extra_token_to_sequence=True,
    drop_last_partial_validation_sequence=True, mid_level_dataset_surplus=0.005,
)
SPLITS = ("train", "valid", "test")
CASES = golden_cases("datasets")


def _prefixes(blend, golden_dir):
    return None if blend is None else ([str(golden_dir / p) for p in blend[0]], blend[1])


def make_config(case, golden_dir, path_to_cache, **overrides) -> GPTDatasetConfig:
    fields = dict(DEFAULTS)
    fields.update(case["config"])
    if "blend" in fields:
        fields["blend"] = _prefixes(fields["blend"], golden_dir)
    if "blend_per_split" in fields:
        fields["blend_per_split"] = [_prefixes(b, golden_dir) for b in fields["blend_per_split"]]
    tok = case["tokenizer"]
    fields.update(overrides)
    return GPTDatasetConfig(tokenizer=SimpleTokenizer(tok["vocab_size"], tok["eod"], tok["pad"]),
                            path_to_cache=str(path_to_cache), **fields)


def build(case, golden_dir, path_to_cache, **overrides):
    cls = {"GPTDataset": GPTDataset, "MockGPTDataset": MockGPTDataset}[case["class"]]
    config = make_config(case, golden_dir, path_to_cache, **overrides)
    return BlendedMegatronDatasetBuilder(cls, case["sizes"], lambda: True, config).build()


def lookup(datasets, name: str):
    """The array named ``name`` (golden naming) computed from the built datasets."""
    split, rest = name.split(".", 1)
    dataset = datasets[SPLITS.index(split)]
    if rest.startswith("sub") and isinstance(dataset, BlendedDataset):
        j, rest = rest[3:].split(".", 1)
        dataset = dataset.datasets[int(j)]
    if rest == "len":
        return numpy.asarray(len(dataset), dtype=numpy.int64)
    if rest.startswith("sample") and rest != "sample_index":
        k, field = rest[len("sample"):].split(".")
        return numpy.asarray(dataset[int(k)][field])
    return numpy.asarray(getattr(dataset, rest))


def assert_matches_golden(datasets, golden):
    for name in golden.files:
        got, want = lookup(datasets, name), golden[name]
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != golden {want.dtype}"
        assert got.shape == want.shape, f"{name}: shape {got.shape} != golden {want.shape}"
        assert numpy.array_equal(got, want), f"{name}: values differ from megatron-core"
    present = {name.split(".")[0] for name in golden.files}
    for split, dataset in zip(SPLITS, datasets):
        assert (dataset is not None) == (split in present), f"{split}: presence differs"


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


@pytest.mark.parametrize("case", [c for c in CASES if c["name"] == "blend_weighted"],
                         ids=["blend_weighted"])
@pytest.mark.parametrize("threads", [1, 3])
def test_threads_do_not_change_the_result(case, golden_dir, tmp_path, threads):
    golden = numpy.load(golden_dir / case["arrays"])
    datasets = build(case, golden_dir, tmp_path, num_dataset_builder_threads=threads)
    assert_matches_golden(datasets, golden)


@pytest.mark.parametrize("case", [c for c in CASES if c["name"] == "blend_per_split"],
                         ids=["blend_per_split"])
def test_fast_cache_load_and_deferred_mmap_after_prepare(case, golden_dir, tmp_path):
    golden = numpy.load(golden_dir / case["arrays"])
    build(case, golden_dir, tmp_path)  # prepare the cache
    fast = build(case, golden_dir, tmp_path, fast_cache_load=True)
    assert_matches_golden(fast, golden)
    deferred = build(case, golden_dir, tmp_path, defer_npy_index_mmap=True)
    train = deferred[0]
    assert not train.indices_loaded and len(train) == 300
    assert_matches_golden(deferred, golden)
