"""GPTDatasets built from a warm index cache hold no open file descriptors."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split
from tokenloom.format._mapping import holds_descriptor


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd") or holds_descriptor(),
    reason="needs /proc/self/fd and fd-free mappings",
)
def test_warm_gpt_datasets_hold_no_descriptors(tmp_path):
    prefix = write_corpus(tmp_path / "c", numpy.random.default_rng(1).integers(5, 50, 120))
    config = small_config(prefix, tmp_path / "cache")

    def build():
        low = GPTDataset.build_low_level_dataset(prefix, config)
        dataset = GPTDataset(
            low, prefix, split_indices(config, Split.train, len(low)), None, Split.train, config
        )
        dataset[0]  # indices and tokens mapped
        return dataset

    first = build()  # writes the cache
    before = len(os.listdir("/proc/self/fd"))
    datasets = [build() for _ in range(100)]
    assert len(os.listdir("/proc/self/fd")) - before <= 3
    for index in (0, 5, len(first) - 1):
        numpy.testing.assert_array_equal(datasets[-1][index]["tokens"], first[index]["tokens"])
