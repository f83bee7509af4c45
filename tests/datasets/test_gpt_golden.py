"""GPTDataset and MockGPTDataset against megatron-core 0.16.1's golden vectors.

Each split is built directly (split document ranges computed as the builder does);
every index array, len() and every recorded sample field must match exactly, values
and dtypes.
"""

from __future__ import annotations

import numpy
import pytest
from tests.support.dataset_files import (
    GOLDEN_DIR,
    golden_case,
    golden_config,
    sample_ids,
    split_indices,
)

from tokenloom.datasets import GPTDataset, MockGPTDataset, Split

requires_golden = pytest.mark.skipif(
    not (GOLDEN_DIR / "manifest.json").is_file(), reason=f"golden vectors not found at {GOLDEN_DIR}"
)

SINGLE_CASES = [
    "single_basic",
    "single_multi_epoch_separate_final",
    "single_multi_epoch_joint_final",
    "single_no_extra_token",
    "single_masks",
]
FIELDS = ["tokens", "labels", "attention_mask", "loss_mask", "position_ids"]


def _assert_same(expected, actual, what):
    assert actual is not None, f"{what}: missing"
    actual = numpy.asarray(actual)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    numpy.testing.assert_array_equal(actual, expected, err_msg=what)


def _check_split(dataset, arrays, split):
    for name in ("document_index", "sample_index", "shuffle_index"):
        _assert_same(arrays[f"{split}.{name}"], getattr(dataset, name), f"{split}.{name}")
    assert len(dataset) == int(arrays[f"{split}.len"])
    ids = sample_ids(arrays, split)
    assert ids, "the golden file records samples"
    for k in ids:
        sample = dataset[k]
        recorded = {f for f in FIELDS if f"{split}.sample{k}.{f}" in arrays.files}
        assert set(sample) == recorded, f"{split}.sample{k}: fields {sorted(sample)}"
        for field in recorded:
            _assert_same(
                arrays[f"{split}.sample{k}.{field}"], sample[field], f"{split}.sample{k}.{field}"
            )


def _built_splits(case, config, cls, low_level, path):
    count = cls.numel_low_level_dataset(low_level)
    for split in Split:
        if config.split_matrix[split.value] is None:
            continue
        indices = split_indices(config, split, count)
        yield split.name, cls(low_level, path, indices, case["sizes"][split.value], split, config)


@requires_golden
@pytest.mark.parametrize("name", SINGLE_CASES)
def test_single_dataset_cases(name, tmp_path):
    case = golden_case(name)
    config = golden_config(case, path_to_cache=tmp_path)
    arrays = numpy.load(GOLDEN_DIR / case["arrays"])
    path = config.blend[0][0]
    low_level = GPTDataset.build_low_level_dataset(path, config)
    built = dict(_built_splits(case, config, GPTDataset, low_level, path))
    assert set(built) == {k.split(".")[0] for k in arrays.files}
    for split, dataset in built.items():
        _check_split(dataset, arrays, split)


@requires_golden
@pytest.mark.parametrize("name", SINGLE_CASES[:2])
def test_single_dataset_cases_from_cache(name, tmp_path):
    """A second construction loads the cache and serves the same golden values."""
    case = golden_case(name)
    config = golden_config(case, path_to_cache=tmp_path)
    arrays = numpy.load(GOLDEN_DIR / case["arrays"])
    path = config.blend[0][0]
    low_level = GPTDataset.build_low_level_dataset(path, config)
    list(_built_splits(case, config, GPTDataset, low_level, path))
    written = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith("-indices.cache") for n in written)
    for split, dataset in _built_splits(case, config, GPTDataset, low_level, path):
        assert dataset.cache is not None and dataset.indices_loaded
        _check_split(dataset, arrays, split)
    assert sorted(p.name for p in tmp_path.iterdir()) == written


@requires_golden
def test_mock_case():
    case = golden_case("mock")
    config = golden_config(case)
    assert config.mock and config.split == "1,1,1"
    arrays = numpy.load(GOLDEN_DIR / case["arrays"])
    low_level = MockGPTDataset.build_low_level_dataset(None, config)
    for split, dataset in _built_splits(case, config, MockGPTDataset, low_level, None):
        _check_split(dataset, arrays, split)
