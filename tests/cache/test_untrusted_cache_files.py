"""Crafted index-cache files (issue 18, class 5): a header or pack table that nests
100,000 levels deep behind a valid CRC32 is a damaged entry, rebuilt like any other,
never a RecursionError; one longer than the header limit is not even read."""

from __future__ import annotations

import logging
import os
import struct
from collections import OrderedDict

import numpy
import pytest
from tests.support.cache_files import header
from tests.support.dataset_files import small_config, write_corpus
from tests.support.random_corpora import EOD
from tests.support.random_corpora import write_corpus as write_random_corpus
from tests.support.untrusted_files import craft_entry_header, craft_pack_table, deep_inside

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.cache import CacheKey, IndexCache
from tokenloom.cache import entry as cache_file
from tokenloom.cache import pack as cache_pack
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer, Split
from tokenloom.errors import CacheError
from tokenloom.process_caches import clear_process_caches

NAMES = ["a", "b"]


@pytest.fixture
def stored(tmp_path):
    cache = IndexCache(tmp_path / "cache")
    key = CacheKey("GPTDataset", "train", OrderedDict([("seed", 1)]))
    cache.store(key, {"a": numpy.arange(100, dtype=numpy.int32), "b": numpy.arange(10.0)})
    return cache, key


@pytest.mark.parametrize("member", ["description", "arrays", "checks"])
def test_deep_header_with_a_valid_crc_is_a_miss_or_cache_error(stored, member):
    cache, key = stored
    path = cache.description_path(key)
    record, _ = header(path)
    craft_entry_header(path, deep_inside(record, member))
    for verify in ("size", "checksum"):
        assert cache.lookup(key, NAMES, verify=verify) is None
        with pytest.raises(CacheError, match="index cache entry header.*levels deep"):
            cache.load(key, NAMES, verify=verify)


def test_header_length_over_the_limit_is_not_read(stored):
    cache, key = stored
    path = cache.description_path(key)
    with open(path, "r+b") as handle:  # a header length of 1 TiB in a sparse 1 TiB file
        handle.seek(8)
        handle.write(struct.pack("<Q", 1 << 40))
        handle.truncate((1 << 40) + 64)
    with pytest.raises(CacheError, match="exceeds the limit"):
        cache.load(key, NAMES)
    assert cache_file.MAX_HEADER_BYTES < 1 << 40


def test_deep_header_of_a_gpt_cache_is_rebuilt(tmp_path, caplog):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    config = small_config(prefix, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(prefix, config)
    first = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
    expected = [first[k]["tokens"].copy() for k in range(len(first))]
    path = first.cache.description_path(first.cache_key)
    record, _ = header(path)
    craft_entry_header(path, deep_inside(record, "description"))
    clear_process_caches()
    with caplog.at_level(logging.WARNING):
        again = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
        for k, tokens in enumerate(expected):
            numpy.testing.assert_array_equal(again[k]["tokens"], tokens)
    assert "damaged or stale; rebuilding" in caplog.text
    assert header(path)[0]["description"]  # rewritten, readable again


def _blend(corpora, cache):
    config = GPTDatasetConfig(
        random_seed=5,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(cache),
        blend=(list(corpora), [3, 2, 1]),
        mid_level_dataset_surplus=0.05,
    )
    blend = BlendedMegatronDatasetBuilder(GPTDataset, [60, 0, 0], lambda: True, config).build()[0]
    return [blend[k]["tokens"].tolist() for k in range(len(blend))]


@pytest.mark.parametrize("table", ["deep", "long"])
def test_deep_or_long_pack_table_with_a_valid_crc_is_rebuilt(tmp_path, caplog, table):
    corpora = [write_random_corpus(str(tmp_path / f"p{i}"), 12 + 3 * i, seed=i) for i in range(3)]
    cache = tmp_path / "cache"
    cold = _blend(corpora, cache)
    folder = cache / cache_pack.PACK_DIR
    (pack,) = os.listdir(folder)
    if table == "deep":
        # a version 1 (JSON) table: old packs are still read, bounded in depth
        craft_pack_table(folder / pack, deep_inside({"format": "x"}, "entries"), b"TLIDXP01")
    else:  # a table length far over the limit, in a sparse file that long
        with open(folder / pack, "r+b") as handle:
            handle.seek(8)
            handle.write(struct.pack("<Q", 1 << 40))
            handle.truncate((1 << 40) + 64)
    clear_process_caches()
    for name in os.listdir(cache):  # without the memo, the pack is listed at start
        if name.endswith("-startup-memo.json"):
            os.unlink(cache / name)
    with caplog.at_level(logging.WARNING):
        assert _blend(corpora, cache) == cold
    assert f"index cache pack {folder / pack} is damaged" in caplog.text
    assert "levels deep" in caplog.text if table == "deep" else "exceeds the limit" in caplog.text


@pytest.mark.timeout(60)
def test_a_fifo_in_the_packs_folder_does_not_block(tmp_path, caplog):
    corpora = [write_random_corpus(str(tmp_path / f"p{i}"), 12 + 3 * i, seed=i) for i in range(3)]
    cache = tmp_path / "cache"
    cold = _blend(corpora, cache)
    os.mkfifo(cache / cache_pack.PACK_DIR / f"0-planted{cache_pack.PACK_SUFFIX}")
    clear_process_caches()
    with caplog.at_level(logging.WARNING):
        assert _blend(corpora, cache) == cold
    assert "not a regular file" in caplog.text
