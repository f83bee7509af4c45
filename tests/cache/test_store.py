"""tokenloom.cache: keys, atomic stores, and detection of corrupt or truncated files."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
from collections import OrderedDict

import numpy
import pytest
from tests.support.cache_files import flip_byte_of, header, rewrite_header
from tests.support.waiting import wait_for_newer_mtime

from tokenloom import cache as cache_module
from tokenloom.cache import (
    CacheKey,
    IndexCache,
    array_digest,
    describe,
    description_hash,
    file_identity,
)
from tokenloom.cache import entry as cache_file
from tokenloom.errors import CacheError
from tokenloom.format import _mapping

NAMES = ["a", "b", "empty"]


def arrays():
    return {
        "a": numpy.arange(1000, dtype=numpy.int32),
        "b": numpy.arange(20, dtype=numpy.int64).reshape(10, 2) * 3,
        "empty": numpy.zeros((0, 2), dtype=numpy.int32),
    }


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


_header, _rewrite_header = header, rewrite_header


def test_round_trip(stored):
    cache, key = stored
    assert cache.exists(key, NAMES)
    for mmap in (True, False):
        loaded = cache.lookup(key, NAMES, mmap=mmap)
        for name, value in arrays().items():
            assert loaded[name].dtype == value.dtype
            numpy.testing.assert_array_equal(loaded[name], value)
    record, _ = _header(cache.description_path(key))
    assert record["format"] == cache_module.CACHE_FORMAT
    assert all(meta["offset"] % 64 == 0 for meta in record["arrays"].values())
    assert record["arrays"]["a"]["shape"] == [1000] and record["checks"] == {"indices": "abc"}


def test_store_leaves_no_temporary_files(stored):
    cache, key = stored
    files = sorted(os.listdir(cache.path_to_cache))
    assert files == [f"{key.stem}-indices.cache"]  # one file per entry
    assert set(cache.paths(key, NAMES).values()) == {cache.entry_path(key)}


def test_miss_and_checks(stored, tmp_path):
    cache, key = stored
    other = CacheKey("GPTDataset", "train", {"seed": 2})
    assert cache.lookup(other, NAMES) is None and not cache.exists(other, NAMES)
    assert cache.lookup(key, NAMES, checks={"indices": "zzz"}) is None
    assert cache.lookup(key, NAMES, checks={"indices": "abc"}) is not None
    with pytest.raises(CacheError, match=f"{other.stem}-indices.cache"):
        cache.load(other, NAMES)


def test_probe_says_whether_a_missed_entry_is_present(stored, monkeypatch):
    cache, key = stored
    found, present = cache.probe(key, NAMES, checks={"indices": "abc"})
    assert present and found is not None
    numpy.testing.assert_array_equal(found["b"], arrays()["b"])
    assert cache.probe(key, NAMES, checks={"indices": "zzz"}) == (None, True)  # stale
    _truncate(cache.entry_path(key))
    assert cache.probe(key, NAMES) == (None, True)  # damaged
    with pytest.raises(CacheError, match="truncated"):
        cache.probe(key, NAMES, on_corrupt="raise")
    other = CacheKey("GPTDataset", "train", {"seed": 2})
    monkeypatch.setattr(
        cache, "exists", lambda *_: pytest.fail("an absent entry is looked for twice")
    )
    assert cache.probe(other, NAMES) == (None, False)


def test_probe_of_packed_entries(tmp_path):
    from tokenloom.cache.pack import EntryPacker

    key = CacheKey("GPTDataset", "train", {"seed": 3})
    with EntryPacker(str(tmp_path)) as packer:
        cache = IndexCache(tmp_path, packer)
        assert cache.probe(key, NAMES) == (None, False)
        cache.store(key, arrays(), checks={"indices": "abc"})
        assert cache.probe(key, NAMES)[1] and cache.probe(key, NAMES)[0] is not None  # queued
    cache = IndexCache(tmp_path)
    assert not os.path.exists(cache.entry_path(key))  # in the pack, not a file of its own
    assert cache.probe(key, NAMES)[0]["a"].shape == (1000,)
    assert cache.probe(key, NAMES, checks={"indices": "zzz"}) == (None, True)


def _flip_byte_of_a(path):
    flip_byte_of(path, "a")


def _flip_last_byte(path):
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 8])


def _extend(path):
    open(path, "ab").write(b"\0" * 8)


def _bad_header(path):
    data = open(path, "rb").read().replace(b'"<i4"', b'"<i8"', 1)
    open(path, "wb").write(data)


def _bad_dtype_valid_crc(path):
    record, _ = _header(path)
    record["arrays"]["a"]["dtype"] = "<i8"  # shape x itemsize no longer matches nbytes
    _rewrite_header(path, record)


def _bad_extent_valid_crc(path):
    record, _ = _header(path)
    record["arrays"]["a"]["offset"] = record["data_bytes"]  # past the end of the data
    _rewrite_header(path, record)


@pytest.mark.parametrize(
    "damage",
    [
        _flip_byte_of_a,
        _flip_last_byte,
        _truncate,
        _extend,
        _bad_header,
        _bad_dtype_valid_crc,
        _bad_extent_valid_crc,
        os.unlink,
    ],
)
def test_damaged_array_is_never_used(stored, damage):
    cache, key = stored
    damage(cache.paths(key, ["a"])["a"])
    assert cache.lookup(key, NAMES) is None
    if damage is not os.unlink:
        with pytest.raises(CacheError, match=r"-indices\.cache"):
            cache.lookup(key, NAMES, on_corrupt="raise")
    with pytest.raises(CacheError):
        cache.load(key, NAMES)


def test_size_check_skips_the_checksum(stored):
    cache, key = stored
    _flip_byte_of_a(cache.entry_path(key))
    assert cache.lookup(key, NAMES, verify="size") is not None  # same size: only a CRC sees it
    assert cache.lookup(key, NAMES, verify="checksum") is None
    _truncate(cache.entry_path(key))
    assert cache.lookup(key, NAMES, verify="size") is None


@pytest.mark.parametrize(
    "content", [b"", b"{broken", b"TLIDXC03" + bytes(20), json.dumps({"format": "other"}).encode()]
)
def test_damaged_description_is_never_used(stored, content):
    cache, key = stored
    open(cache.description_path(key), "wb").write(content)
    assert cache.lookup(key, NAMES) is None
    with pytest.raises(CacheError, match="header|cache file"):
        cache.lookup(key, NAMES, on_corrupt="raise")


@pytest.mark.parametrize(
    "field, value", [("format", "tokenloom-index-cache/2"), ("description", []), ("hash", "0" * 32)]
)
def test_header_of_another_format_or_key_is_rejected(stored, field, value):
    cache, key = stored
    record, _ = _header(cache.entry_path(key))
    record[field] = value
    _rewrite_header(cache.entry_path(key), record)
    with pytest.raises(CacheError, match="description|cache file"):
        cache.load(key, NAMES)


def test_description_of_another_key_is_rejected(stored):
    cache, key = stored
    record, _ = _header(cache.description_path(key))
    record["description"]["seed"] = 99
    _rewrite_header(cache.description_path(key), record)
    with pytest.raises(CacheError, match="does not match"):
        cache.load(key, NAMES)


def test_mapped_arrays_hold_no_descriptor(stored):
    cache, key = stored
    before = len(os.listdir("/proc/self/fd"))
    loaded = cache.lookup(key, NAMES)
    assert len(os.listdir("/proc/self/fd")) == before or _mapping.holds_descriptor()
    assert not loaded["a"].flags.writeable and int(loaded["a"][999]) == 999


def test_crash_while_writing_leaves_nothing_loadable(tmp_path, monkeypatch):
    cache = IndexCache(tmp_path)
    key = CacheKey("GPTDataset", "test", {"x": 1})
    real_open = cache_file.atomic_open

    @contextlib.contextmanager
    def dying_open(path, mode, durable=True):
        with real_open(path, mode, durable=durable) as handle:

            class Dying:
                calls = 0

                def write(self, data):
                    Dying.calls += 1
                    if Dying.calls == 4:  # inside the arrays
                        handle.write(b"partial")
                        raise KeyboardInterrupt("rank killed")
                    return handle.write(data)

            yield Dying()

    monkeypatch.setattr(cache_file, "atomic_open", dying_open)
    with pytest.raises(KeyboardInterrupt):
        cache.store(key, arrays())
    monkeypatch.setattr(cache_file, "atomic_open", real_open)
    assert not os.path.exists(cache.entry_path(key))
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
    wait_for_newer_mtime(f"{prefix}.idx")  # as a real rewrite later on would be
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
