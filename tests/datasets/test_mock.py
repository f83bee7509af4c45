"""MockGPTLowLevelDataset / MockGPTDataset (the golden 'mock' case covers the indices)."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.dataset_files import FLAGS

from tokenloom.datasets import GPTDatasetConfig, MockGPTDataset, MockGPTLowLevelDataset, Split
from tokenloom.datasets.split import split_document_range
from tokenloom.errors import ConfigError


def mock_config(**overrides):
    return GPTDatasetConfig(
        random_seed=3,
        sequence_length=32,
        tokenizer={"vocab_size": 50, "eod": 0},
        **FLAGS,
        **overrides,
    )


def test_low_level_documents():
    low = MockGPTLowLevelDataset(mock_config().tokenizer)
    assert len(low) == 100000 and low.sequence_lengths.dtype == numpy.int32
    assert low.sequence_lengths.min() >= 1 and low.sequence_lengths.max() < 4096
    expected = numpy.random.default_rng(0).integers(1, 4096, 100000, dtype=numpy.int32)
    numpy.testing.assert_array_equal(low.sequence_lengths, expected)
    doc = low[7]
    n = int(low.sequence_lengths[7])
    assert doc.dtype == numpy.int64 and len(doc) == n
    numpy.testing.assert_array_equal(doc[:-1], (numpy.arange(n - 1) + 1) % 50)
    assert doc[-1] == 0
    numpy.testing.assert_array_equal(low.get(7, offset=3, length=5), doc[3:8])
    numpy.testing.assert_array_equal(low.get(7, offset=n - 2), doc[-2:])
    with pytest.raises(IndexError):
        low.get(7, offset=n - 1, length=2)


def test_mock_dataset_without_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = mock_config()
    low = MockGPTDataset.build_low_level_dataset(None, config)
    begin, end = split_document_range(config.split_matrix[1], len(low))
    ds = MockGPTDataset(
        low, None, numpy.arange(begin, end, dtype=numpy.int32), 12, Split.valid, config
    )
    assert ds.cache is None and os.listdir(tmp_path) == []
    sample = ds[3]
    assert sample["tokens"].shape == (32,) and set(numpy.unique(sample["tokens"])) <= set(range(50))


def test_mock_dataset_with_cache_reuses_it(tmp_path):
    config = mock_config(path_to_cache=str(tmp_path))
    low = MockGPTDataset.build_low_level_dataset(None, config)
    indices = numpy.arange(0, 500, dtype=numpy.int32)
    first = MockGPTDataset(low, None, indices, 20, Split.train, config)
    again = MockGPTDataset(low, None, indices, 20, Split.train, config, build_if_missing=False)
    numpy.testing.assert_array_equal(first.sample_index, again.sample_index)
    assert again.cache_identifiers["data"]["class"] == "MockGPTLowLevelDataset"


def test_mock_needs_vocab_size():
    with pytest.raises(ConfigError, match="vocab_size"):
        MockGPTLowLevelDataset(type("T", (), {"vocab_size": None, "eod": 0})())
