"""Remote prefixes through IndexedDataset, the builder and blends: every document,
GPT sample and blended sample read via S3 and via MSC equals the local read."""

from __future__ import annotations

import logging
import os
import pickle

import numpy
import pytest
from tests.storage.storage_helpers import BUCKET, storage_config

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.errors import ConfigError
from tokenloom.format import IndexedDataset

pytestmark = pytest.mark.s3


def _remote(s3, name: str, scheme: str) -> str:
    return s3.remote[name] if scheme == "s3" else s3.msc(name)


@pytest.mark.parametrize("scheme", ["s3", "msc"])
@pytest.mark.parametrize("name", ["small", "wide"])
def test_every_document_equals_local(s3, tmp_path, scheme, name):
    local = IndexedDataset(s3.local[name])
    remote = IndexedDataset(
        _remote(s3, name, scheme),
        mmap=False,
        object_storage_config=storage_config(tmp_path, bin_chunk_nbytes=3000),
    )
    assert len(remote) == len(local) and remote.dtype == local.dtype
    numpy.testing.assert_array_equal(remote.document_indices, local.document_indices)
    for i in range(len(local)):
        numpy.testing.assert_array_equal(remote[i], local[i])
        assert remote[i].dtype == local[i].dtype
    for a, b in zip(remote[3:40], local[3:40]):
        numpy.testing.assert_array_equal(a, b)
    numpy.testing.assert_array_equal(remote.get(5, 1, 3), local.get(5, 1, 3))
    assert remote.get(5, 2, 0).shape == (0,)


def test_mmap_true_picks_the_remote_reader_and_says_so_once(s3, tmp_path, caplog):
    from tokenloom.storage.integration import REMOTE_MMAP_NOTE

    REMOTE_MMAP_NOTE.reset()
    config = storage_config(tmp_path)
    with caplog.at_level(logging.INFO, logger="tokenloom"):
        first = IndexedDataset(s3.remote["small"], object_storage_config=config)  # mmap=True
        IndexedDataset(s3.remote["other"], object_storage_config=config)
    numpy.testing.assert_array_equal(first[7], IndexedDataset(s3.local["small"])[7])
    notes = [r for r in caplog.records if "memory-mapped" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO


def test_exists_and_pickle(s3, tmp_path):
    assert IndexedDataset.exists(s3.remote["small"]) and IndexedDataset.exists(s3.msc("small"))
    assert not IndexedDataset.exists(s3.remote["small"] + "-nope")
    assert not IndexedDataset.exists(s3.msc("small") + "-nope")
    remote = IndexedDataset(
        s3.remote["small"], mmap=False, object_storage_config=storage_config(tmp_path)
    )
    again = pickle.loads(pickle.dumps(remote))
    numpy.testing.assert_array_equal(again[11], remote[11])


def _config(tmp_path, prefixes, weights, **extra) -> GPTDatasetConfig:
    return GPTDatasetConfig(
        random_seed=3,
        sequence_length=64,
        blend=(prefixes, weights),
        split="90,10,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, 0),
        path_to_cache=str(tmp_path / "indices"),
        **extra,
    )


def _build(config, sizes):
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def _same_samples(a, b) -> None:
    assert a is not None and b is not None and len(a) == len(b)
    for k in range(len(a)):
        x, y = a[k], b[k]
        assert x.keys() == y.keys()
        for key in x:
            numpy.testing.assert_array_equal(numpy.asarray(x[key]), numpy.asarray(y[key]))


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_every_gpt_and_blended_sample_equals_local(s3, tmp_path, scheme):
    names, weights = ["small", "other"], [0.6, 0.4]
    local = _build(_config(tmp_path / "l", [s3.local[n] for n in names], weights), [150, 15, 0])
    remote_config = _config(
        tmp_path / "r",
        [_remote(s3, n, scheme) for n in names],
        weights,
        object_storage_cache_path=str(tmp_path / "idx"),
        object_storage_config=storage_config(tmp_path, bin_chunk_nbytes=8192),
    )
    remote = _build(remote_config, [150, 15, 0])
    for split in (0, 1):
        _same_samples(remote[split], local[split])
        for sub_remote, sub_local in zip(remote[split].datasets, local[split].datasets):
            _same_samples(sub_remote, sub_local)  # every GPT sample of each part
    single = _build(
        _config(
            tmp_path / "s",
            [_remote(s3, "small", scheme)],
            None,
            object_storage_cache_path=str(tmp_path / "idx"),
        ),
        [40, 0, 0],
    )[0]
    _same_samples(
        single, _build(_config(tmp_path / "ls", [s3.local["small"]], None), [40, 0, 0])[0]
    )


def test_remote_prefix_without_path_to_cache_gets_a_local_default(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=32,
        blend=([s3.remote["small"]], None),
        split="100,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, 0),
        object_storage_cache_path=str(tmp_path / "idx"),
    )
    train = _build(config, [20, 0, 0])[0]
    assert len(train) >= 20
    assert not (tmp_path / "s3:").exists()  # megatron-core writes ./s3:/...
    assert list((tmp_path / "idx").rglob("*.npy")) or list((tmp_path / "idx").rglob("*cache*"))


def test_remote_prefix_without_any_local_folder_is_a_clear_error(s3):
    with pytest.raises(ConfigError, match="object_storage_cache_path"):
        GPTDatasetConfig(
            random_seed=1,
            sequence_length=32,
            blend=([s3.remote["small"]], None),
            split="100,0,0",
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            tokenizer=SimpleTokenizer(32000, 0),
        )


def test_replaced_remote_dataset_is_not_served_from_a_stale_index_cache(s3, tmp_path):
    client = s3.client()
    for suffix in (".bin", ".idx"):
        client.upload_file(s3.local["small"] + suffix, BUCKET, "swap/d" + suffix)
    config = _config(
        tmp_path, [f"s3://{BUCKET}/swap/d"], None, object_storage_cache_path=str(tmp_path / "idx")
    )
    first = _build(config, [30, 0, 0])[0]
    for suffix in (".bin", ".idx"):
        client.upload_file(s3.local["other"] + suffix, BUCKET, "swap/d" + suffix)
    second = _build(config, [30, 0, 0])[0]
    expected = _build(_config(tmp_path / "o", [s3.local["other"]], None), [30, 0, 0])[0]
    _same_samples(second, expected)
    assert not numpy.array_equal(first.document_index, second.document_index) or len(
        first.dataset
    ) != len(second.dataset)
    assert os.path.isdir(tmp_path / "idx")
