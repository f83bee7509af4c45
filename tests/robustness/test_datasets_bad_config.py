"""Weird configs, sizes and sample indices: ConfigError/TypeError/IndexError, no hang,
no MemoryError traceback, no silently truncated index."""

from __future__ import annotations

import numpy
import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.datasets.split import parse_and_normalize_split
from tokenloom.errors import ConfigError
from tokenloom.format import IndexedDatasetBuilder


def _config(tmp_path, **fields):
    base = dict(
        random_seed=5,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, 2),
        path_to_cache=str(tmp_path / "cache"),
    )
    base.update(fields)
    return GPTDatasetConfig(**base)


def _build(tmp_path, sizes, **fields):
    return BlendedMegatronDatasetBuilder(
        GPTDataset, sizes, lambda: True, _config(tmp_path, **fields)
    ).build()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [
        write_corpus(root / "a", [40] * 60, seed=1),
        write_corpus(root / "b", [25] * 40, seed=2),
    ]


@pytest.mark.parametrize("split", ["9" * 400, "9" * 400 + ",1"])
def test_split_weights_that_overflow_are_refused(split):
    with pytest.raises(ConfigError, match="too large"):
        parse_and_normalize_split(split)


def test_blend_weights_that_overflow_are_refused(tmp_path, corpora):
    with pytest.raises(ConfigError, match="too large to add up"):
        _config(tmp_path, blend=(corpora, [1e308, 1e308]), split="90,10,0")


@pytest.mark.timeout(60)
def test_huge_sizes_are_a_config_error_not_a_memory_error(tmp_path, corpora):
    with pytest.raises(ConfigError, match="num_samples=1000000000000000.*do not fit in memory"):
        _build(tmp_path, [10**15, None, None], blend=([corpora[0]], None), split="100,0,0")


@pytest.mark.timeout(60)
def test_sequence_length_beyond_memory_is_a_config_error(tmp_path, corpora):
    with pytest.raises(ConfigError, match="sequence_length=1099511627776"):
        _build(
            tmp_path,
            [10, None, None],
            blend=([corpora[0]], None),
            split="100,0,0",
            sequence_length=2**40,
        )
    train, _, _ = _build(
        tmp_path,
        [2, None, None],
        blend=([corpora[0]], None),
        split="100,0,0",
        sequence_length=1_000_000,
    )
    with pytest.raises(ConfigError, match="create_attention_mask=False"):
        train[0]


def _corpus(path, documents):
    builder = IndexedDatasetBuilder(f"{path}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(numpy.asarray(document, dtype=numpy.uint16))
        builder.end_document()
    builder.finalize(f"{path}.idx")
    return str(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("documents", [[], [[]] * 10, [[5]]], ids=["none", "all-empty", "1-token"])
def test_corpora_that_cannot_give_a_sample_fail_fast(tmp_path, corpora, documents):
    empty = _corpus(tmp_path / "empty", documents)
    with pytest.raises(ConfigError, match="cannot give any sample"):
        _build(tmp_path, [10, 1, 1], blend=([empty], None), split="90,10,0")
    with pytest.raises(ConfigError, match="cannot give any sample"):
        _build(tmp_path, [10, 1, 1], blend=([corpora[0], empty], [0.5, 0.5]), split="90,10,0")


@pytest.mark.timeout(60)
def test_sequence_length_longer_than_the_corpus_repeats_epochs(tmp_path):
    tiny = _corpus(tmp_path / "tiny", [[5, 6, 2]] * 3)
    train, _, _ = _build(
        tmp_path, [10, None, None], blend=([tiny], None), split="100,0,0", sequence_length=24
    )
    assert len(train) >= 10
    assert set(train[9]["tokens"].tolist()) <= {0, 5, 6, 2}


def test_non_integer_sample_indices_are_refused(tmp_path, corpora):
    train, _, _ = _build(tmp_path, [10, 5, 1], blend=(corpora, [0.3, 0.7]), split="90,10,0")
    for dataset in (train, train.datasets[0]):
        for bad in (1.0, 1.7, "1", numpy.array([1])):
            with pytest.raises(TypeError, match="integer"):
                dataset[bad]
        for bad in ([1.5], ["a"]):
            with pytest.raises(TypeError, match="integer"):
                dataset.get_batch(bad)
        with pytest.raises(IndexError):
            dataset[len(dataset)]
        numpy.testing.assert_array_equal(dataset[numpy.int64(1)]["tokens"], dataset[1]["tokens"])
        numpy.testing.assert_array_equal(
            dataset.get_batch([numpy.uint8(1), -1])["tokens"][0], dataset[1]["tokens"]
        )


@pytest.mark.parametrize("text", ["98;2;0", "98:2:0", "98_2_0", "98 ; 2:0"])
def test_split_separators_megatron_accepts(text):
    from tokenloom.datasets.split import parse_and_normalize_split

    assert parse_and_normalize_split(text) == pytest.approx([0.98, 0.02, 0.0])
