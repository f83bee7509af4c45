"""Index caches that were truncated, swapped, edited, raced or outlived their data.

What is detected when a .bin/.idx pair is regenerated under the same path (see
``test_regenerated_idx_*``): a different size, a different mtime, or a different
first/last 256 KiB of the .idx each change the cache key. An .idx rewritten with the
same size, a middle-only change and its mtime set back with ``os.utime`` is NOT
detected (the identity samples the head and tail only); the .bin content does not
shape the indices, so a changed .bin of the same size cannot make the cache wrong.
"""

from __future__ import annotations

import multiprocessing
import os
import struct
from collections import OrderedDict

import numpy
import pytest
from tests.support.cache_files import array_extent, header, rewrite_header
from tests.support.dataset_files import small_config, write_corpus, write_large_corpus

from tokenloom.cache import CacheKey, IndexCache, file_identity
from tokenloom.datasets import GPTDataset, Split
from tokenloom.errors import CacheError

NAMES = ["a", "b"]


@pytest.fixture
def stored(tmp_path):
    cache = IndexCache(tmp_path / "cache")
    key = CacheKey("GPTDataset", "train", OrderedDict([("seed", 1)]))
    cache.store(key, {"a": numpy.arange(100, dtype=numpy.int32), "b": numpy.arange(10.0)})
    return cache, key


def _edit_description(cache, key, edit):
    """Edit the header deliberately (its CRC made valid again)."""
    path = cache.description_path(key)
    record, _ = header(path)
    edit(record)
    rewrite_header(path, record)


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r.__setitem__("arrays", []),
        lambda r: r.__setitem__("arrays", "x"),
        lambda r: r["arrays"]["a"].pop("dtype"),
        lambda r: r["arrays"]["a"].__setitem__("dtype", "no-such-dtype"),
        lambda r: r["arrays"]["a"].__setitem__("shape", None),
        lambda r: r["arrays"]["a"].__setitem__("nbytes", "many"),
        lambda r: r["arrays"]["a"].__setitem__("crc32", "x"),
        lambda r: r["arrays"]["a"].__setitem__("offset", -64),
        lambda r: r["arrays"]["a"].__setitem__("offset", 3),
        lambda r: r["arrays"]["a"].__setitem__("shape", [-100]),
        lambda r: r["arrays"]["a"].__setitem__("dtype", "|O"),
        lambda r: r.__setitem__("data_bytes", "x"),
    ],
    ids=[
        "arrays-list",
        "arrays-str",
        "no-dtype",
        "bad-dtype",
        "shape-none",
        "nbytes-str",
        "crc-str",
        "offset-negative",
        "offset-unaligned",
        "shape-negative",
        "object-dtype",
        "size-str",
    ],
)
def test_edited_description_is_a_miss_or_cache_error(stored, edit):
    cache, key = stored
    _edit_description(cache, key, edit)
    for verify in ("size", "checksum"):
        assert cache.lookup(key, NAMES, verify=verify) is None
        with pytest.raises(CacheError, match=r"description|malformed|does not fit"):
            cache.load(key, NAMES, verify=verify)


def test_header_edited_without_its_crc_is_a_cache_error(stored):
    cache, key = stored
    path = cache.entry_path(key)
    data = open(path, "rb").read().replace(b'"<i4"', b'"<i8"', 1)
    open(path, "wb").write(data)
    for verify in ("size", "checksum"):
        with pytest.raises(CacheError, match="CRC32"):
            cache.load(key, NAMES, verify=verify)


def test_swapped_entry_of_other_dtype_or_content(stored):
    cache, key = stored
    path = cache.paths(key, ["a"])["a"]
    other = CacheKey("GPTDataset", "train", OrderedDict([("seed", 2)]))
    cache.store(other, {"a": numpy.arange(50, dtype=numpy.int64), "b": numpy.arange(10.0)})
    os.replace(cache.entry_path(other), path)  # same byte count, other dtype, other key
    with pytest.raises(CacheError, match="does not match the cache key"):
        cache.load(key, NAMES, verify="size")
    cache.store(key, {"a": numpy.arange(100, dtype=numpy.int32), "b": numpy.arange(10.0)})
    first, count = array_extent(path, "a")
    data = bytearray(open(path, "rb").read())  # same header, other content
    data[first : first + count] = numpy.arange(100, dtype=numpy.int32)[::-1].tobytes()
    open(path, "wb").write(bytes(data))
    assert cache.load(key, NAMES, verify="size")["a"][0] == 99  # size checks cannot see it
    with pytest.raises(CacheError, match="CRC32"):
        cache.load(key, NAMES, verify="checksum")


def test_truncated_npy_in_a_gpt_cache_is_rebuilt(tmp_path):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    config = small_config(prefix, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(prefix, config)
    first = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
    expected = first[3]["tokens"].copy()
    path = first.cache.paths(first.cache_key, ["sample_index"])["sample_index"]
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 5)
    again = GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)
    numpy.testing.assert_array_equal(again[3]["tokens"], expected)
    with pytest.raises(CacheError):  # a reader that may not build reports it
        with open(path, "r+b") as handle:
            handle.truncate(10)
        GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config, build_if_missing=False)


def test_path_to_cache_that_is_a_file(tmp_path):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    (tmp_path / "plain").write_text("not a directory")
    for where in (tmp_path / "plain", tmp_path / "plain" / "below"):
        config = small_config(prefix, where)
        low = GPTDataset.build_low_level_dataset(prefix, config)
        with pytest.raises(CacheError, match="writable directory"):
            GPTDataset(low, prefix, numpy.arange(32), None, Split.train, config)


def _build_in_child(prefix, cache_dir, queue):
    config = small_config(prefix, cache_dir)
    low = GPTDataset.build_low_level_dataset(prefix, config)
    dataset = GPTDataset(low, prefix, numpy.arange(150), 2000, Split.train, config)
    queue.put((len(dataset), dataset.sample_index.tobytes(), dataset.shuffle_index.tobytes()))


@pytest.mark.timeout(60)
@pytest.mark.processes
def test_two_processes_building_the_same_cache_agree(tmp_path):
    prefix = write_corpus(tmp_path / "corpus", [37] * 200)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [
        context.Process(target=_build_in_child, args=(prefix, str(tmp_path / "c"), queue))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=50) for _ in workers]
    for worker in workers:
        worker.join(10)
        assert worker.exitcode == 0
    assert all(result == results[0] for result in results)
    leftovers = [n for n in os.listdir(tmp_path / "c") if not n.endswith("-indices.cache")]
    assert leftovers == []
    config = small_config(prefix, tmp_path / "c")
    low = GPTDataset.build_low_level_dataset(prefix, config)
    reread = GPTDataset(
        low, prefix, numpy.arange(150), 2000, Split.train, config, build_if_missing=False
    )  # the cache that is left is complete
    assert reread.sample_index.tobytes() == results[0][1]


def _rewrite_idx_length(prefix, sequence, value, keep_mtime):
    path = prefix + ".idx"
    stat = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(34 + 4 * sequence)
        handle.write(struct.pack("<i", value))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_regenerated_idx_with_new_mtime_gets_a_new_identity(tmp_path):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    before = file_identity(prefix)
    _rewrite_idx_length(prefix, 20, 29, keep_mtime=False)
    os.utime(prefix + ".idx", ns=(1, before["idx"]["mtime_ns"] + 10**9))
    assert file_identity(prefix) != before


def test_regenerated_idx_head_change_with_mtime_set_back_is_detected(tmp_path):
    prefix = write_corpus(tmp_path / "corpus", [30] * 40)
    before = file_identity(prefix)
    _rewrite_idx_length(prefix, 5, 29, keep_mtime=True)
    assert os.stat(prefix + ".idx").st_mtime_ns == before["idx"]["mtime_ns"]
    assert file_identity(prefix) != before  # the sampled MD5 covers the head


def test_regenerated_idx_middle_change_with_mtime_set_back_is_detected(tmp_path):
    """A same-size .idx edited only in its middle, with the mtime restored, gets a new
    identity: the digest covers the whole file."""
    count = 200_000  # lengths alone span 800 KB: sequence 100000 is far from both ends
    prefix = write_large_corpus(tmp_path / "corpus", [3] * count)
    before = file_identity(prefix)
    _rewrite_idx_length(prefix, count // 2, 2, keep_mtime=True)
    assert file_identity(prefix) != before
