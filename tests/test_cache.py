"""tokenloom.cache: keys, atomic stores, and detection of corrupt or truncated files."""

from __future__ import annotations

import json
import os
import pickle
import time
from collections import OrderedDict

import numpy
import pytest

from tokenloom import cache as cache_module
from tokenloom.cache import (CacheKey, IndexCache, array_digest, describe, description_hash,
                             file_identity)
from tokenloom.errors import CacheError

NAMES = ["a", "b", "empty"]


def arrays():
    return {"a": numpy.arange(1000, dtype=numpy.int32),
            "b": numpy.arange(20, dtype=numpy.int64).reshape(10, 2) * 3,
            "empty": numpy.zeros((0, 2), dtype=numpy.int32)}


@pytest.fixture
def stored(tmp_path):
    cache = IndexCache(tmp_path / "cache")
    key = CacheKey("GPTDataset", "train", OrderedDict([("seed", 1), ("n", 10)]))
    cache.store(key, arrays(), checks={"indices": "abc"})
    return cache, key


def test_key_is_md5_of_the_ordered_description():
    key = CacheKey("X", "valid", OrderedDict([("b", 1), ("a", [1, 2])]))
    assert key.description == json.dumps({"b": 1, "a": [1, 2]}, separators=(",", ":"))
    assert key.hash == description_hash(key.description) and len(key.hash) == 32
    assert key.stem == f"{key.hash}-X-valid"
    assert CacheKey("X", "valid", {"b": 2, "a": [1, 2]}).hash != key.hash
    assert describe({"v": numpy.int64(3)}) == describe({"v": 3})


def test_round_trip(stored):
    cache, key = stored
    assert cache.exists(key, NAMES)
    for mmap in (True, False):
        loaded = cache.lookup(key, NAMES, mmap=mmap)
        for name, value in arrays().items():
            assert loaded[name].dtype == value.dtype
            numpy.testing.assert_array_equal(loaded[name], value)
    record = json.loads(open(cache.description_path(key)).read())
    assert record["format"] == cache_module.CACHE_FORMAT
    assert record["arrays"]["a"]["shape"] == [1000] and record["checks"] == {"indices": "abc"}


def test_store_leaves_no_temporary_files(stored):
    cache, key = stored
    files = sorted(os.listdir(cache.path_to_cache))
    assert files == sorted([f"{key.stem}-{n}.npy" for n in NAMES] + [f"{key.stem}-description.txt"])


def test_miss_and_checks(stored, tmp_path):
    cache, key = stored
    other = CacheKey("GPTDataset", "train", {"seed": 2})
    assert cache.lookup(other, NAMES) is None and not cache.exists(other, NAMES)
    assert cache.lookup(key, NAMES, checks={"indices": "zzz"}) is None
    assert cache.lookup(key, NAMES, checks={"indices": "abc"}) is not None
    with pytest.raises(CacheError, match=f"{other.stem}-description.txt"):
        cache.load(other, NAMES)


def _flip_last_byte(path):
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 8])


def _bad_header(path):
    data = open(path, "rb").read().replace(b"'<i4'", b"'<i8'")
    open(path, "wb").write(data)


@pytest.mark.parametrize("damage", [_flip_last_byte, _truncate, _bad_header, os.unlink])
def test_damaged_array_is_never_used(stored, damage):
    cache, key = stored
    damage(cache.paths(key, ["a"])["a"])
    assert cache.lookup(key, NAMES) is None
    if damage is not os.unlink:
        with pytest.raises(CacheError, match=r"-a\.npy"):
            cache.lookup(key, NAMES, on_corrupt="raise")
    with pytest.raises(CacheError):
        cache.load(key, NAMES)


def test_size_check_skips_the_checksum(stored):
    cache, key = stored
    _flip_last_byte(cache.paths(key, ["a"])["a"])
    assert cache.lookup(key, NAMES, verify="size") is not None  # same size: only a CRC sees it
    _truncate(cache.paths(key, ["b"])["b"])
    assert cache.lookup(key, NAMES, verify="size") is None


@pytest.mark.parametrize("content", [b"{broken", b"[]", json.dumps({"format": "other"}).encode()])
def test_damaged_description_is_never_used(stored, content):
    cache, key = stored
    open(cache.description_path(key), "wb").write(content)
    assert cache.lookup(key, NAMES) is None
    with pytest.raises(CacheError, match="description"):
        cache.lookup(key, NAMES, on_corrupt="raise")


def test_description_of_another_key_is_rejected(stored):
    cache, key = stored
    record = json.loads(open(cache.description_path(key)).read())
    record["description"]["seed"] = 99
    open(cache.description_path(key), "w").write(json.dumps(record))
    with pytest.raises(CacheError, match="does not match"):
        cache.load(key, NAMES)


def test_crash_while_writing_leaves_nothing_loadable(tmp_path, monkeypatch):
    cache = IndexCache(tmp_path)
    key = CacheKey("GPTDataset", "test", {"x": 1})
    real_save = numpy.save
    calls = []

    def dying_save(handle, array, allow_pickle=False):
        calls.append(1)
        if len(calls) == 2:
            handle.write(b"\x93NUMPY partial")
            raise KeyboardInterrupt("rank killed")
        real_save(handle, array, allow_pickle=allow_pickle)

    monkeypatch.setattr(numpy, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        cache.store(key, arrays())
    monkeypatch.setattr(numpy, "save", real_save)
    assert not os.path.exists(cache.description_path(key))
    assert not os.path.exists(cache.paths(key, ["b"])["b"])
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert cache.lookup(key, NAMES) is None


def test_unwritable_directory_raises_cache_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CacheError, match="writable"):
        IndexCache(blocker / "sub").store(CacheKey("X", "train", {}), arrays())


def test_lazy_arrays(stored):
    cache, key = stored
    lazy = cache.lazy(key, NAMES, checks={"indices": "abc"})
    assert not lazy.loaded
    numpy.testing.assert_array_equal(lazy["a"], arrays()["a"])
    assert lazy.loaded
    clone = pickle.loads(pickle.dumps(lazy))
    assert not clone.loaded and int(clone["b"][9, 1]) == 57
    missing = IndexCache(cache.path_to_cache).lazy(CacheKey("X", "test", {}), NAMES)
    with pytest.raises(CacheError, match="not found"):
        missing["a"]


def test_file_identity_changes_when_data_is_rewritten(tmp_path):
    prefix = str(tmp_path / "d")
    for suffix, data in (("idx", b"I" * 100), ("bin", b"B" * 50)):
        open(f"{prefix}.{suffix}", "wb").write(data)
    first = file_identity(prefix)
    assert first == file_identity(prefix)
    time.sleep(0.01)
    open(f"{prefix}.idx", "wb").write(b"J" * 100)  # same size, new content
    assert file_identity(prefix) != first
    os.unlink(f"{prefix}.bin")
    with pytest.raises(CacheError, match="d.bin"):
        file_identity(prefix)


def test_array_digest():
    a = numpy.arange(5, dtype=numpy.int32)
    assert array_digest(a) == array_digest(a.copy())
    assert array_digest(a) != array_digest(a.astype(numpy.int64))
    assert array_digest(a) != array_digest(a[::-1])
