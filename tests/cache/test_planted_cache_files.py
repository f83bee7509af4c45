"""Something other than a regular file planted under an entry's name in a shared
``path_to_cache`` (a FIFO that would block any open, ``/dev/zero`` through a symbolic
link, a link to a file tokenloom did not write, a directory): a damaged entry, never a
hang. A rank allowed to build rebuilds it (the rename replaces the planted name); one
that may not gets a ``CacheError`` naming the file."""

from __future__ import annotations

import logging
import os
import shutil
from collections import OrderedDict

import numpy
import pytest
from tests.support.dataset_files import small_config, write_corpus

from tokenloom.cache import CacheKey, IndexCache
from tokenloom.cache import pack as cache_pack
from tokenloom.datasets import GPTDataset, Split
from tokenloom.errors import CacheError
from tokenloom.process_caches import clear_process_caches

NAMES = ["a", "b"]
ARRAYS = {"a": numpy.arange(100, dtype=numpy.int32), "b": numpy.arange(10.0)}


def _plant(path: str, kind: str, elsewhere: str) -> None:
    """Replace the entry file at ``path`` by a planted ``kind``."""
    shutil.copyfile(path, elsewhere)  # a genuine entry, outside the cache
    os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "link-to-a-copy":
        os.symlink(elsewhere, path)
    else:
        os.mkdir(path)


KINDS = ["fifo", "dev-zero", "link-to-a-copy", "directory"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_entry_is_a_miss_or_a_cache_error_naming_it_never_a_hang(tmp_path, kind):
    cache = IndexCache(tmp_path / "cache")
    key = CacheKey("GPTDataset", "train", OrderedDict([("seed", 1)]))
    cache.store(key, ARRAYS)
    path = cache.entry_path(key)
    _plant(path, kind, str(tmp_path / "copy"))
    for verify in ("size", "checksum"):
        assert cache.lookup(key, NAMES, verify=verify) is None  # the builder rebuilds
        with pytest.raises(CacheError, match="not a regular file|symbolic link") as caught:
            cache.load(key, NAMES, verify=verify)  # a rank that may not build
        assert path in str(caught.value) and "delete" in str(caught.value)
    if kind != "directory":  # the rebuilt entry replaces the planted name
        cache.store(key, ARRAYS)
        loaded = cache.load(key, NAMES)
        numpy.testing.assert_array_equal(loaded["a"], ARRAYS["a"])
        assert not os.path.islink(path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_gpt_dataset_rebuilds_over_a_planted_entry(tmp_path, caplog, kind):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    config = small_config(prefix, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(prefix, config)
    first = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
    expected = [first[k]["tokens"].copy() for k in range(len(first))]
    path = first.cache.description_path(first.cache_key)
    assert cache_pack.PACK_DIR not in path  # an entry file of its own
    _plant(path, kind, str(tmp_path / "copy"))
    clear_process_caches()
    with caplog.at_level(logging.WARNING):
        again = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
        for k, tokens in enumerate(expected):
            numpy.testing.assert_array_equal(again[k]["tokens"], tokens)
    assert os.path.isfile(path) and not os.path.islink(path)  # rebuilt in its place


@pytest.mark.timeout(60)
def test_a_pack_swapped_for_a_fifo_after_its_listing_does_not_block(tmp_path):
    folder = str(tmp_path / "cache")
    with cache_pack.EntryPacker(folder) as packer:
        cache = IndexCache(folder, packer)
        key = CacheKey("GPTDataset", "train", OrderedDict([("seed", 2)]))
        cache.store(key, ARRAYS)
    cache = IndexCache(folder)
    assert cache.load(key, NAMES)["a"].tolist() == ARRAYS["a"].tolist()  # listed now
    where = cache_pack.locate(folder, key.stem)
    assert where is not None
    os.unlink(where[0])
    os.mkfifo(where[0])  # same name: the listing still points there
    with pytest.raises(CacheError, match="not a regular file"):
        cache.load(key, NAMES)
