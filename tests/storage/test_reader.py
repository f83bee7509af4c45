"""The chunk-cache reader against the loopback S3 server: Megatron's aligned-block
rule, cached blocks, read-ahead, zero-length reads, replaced objects, exists()."""

from __future__ import annotations

import numpy
import pytest
from tests.storage.storage_helpers import BUCKET, storage_config

from tokenloom.errors import FormatError, StorageError
from tokenloom.format import IndexedDataset
from tokenloom.storage import ObjectBinReader, dataset_exists, open_object, parse_url

pytestmark = pytest.mark.s3


def _gets(proxy, key: str):
    return [r[2] for r in proxy.requests("GET") if r[1].endswith(key)]


def test_aligned_block_rule_one_request_per_miss(s3, tmp_path):
    config = storage_config(tmp_path, bin_chunk_nbytes=1000, endpoint_url=s3.proxy.url)
    reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    size = reader.size
    reads = [(2500, 10), (2600, 2), (999, 4), (4000, 1500), (size - 6, 3)]
    for offset, count in reads:
        expected = numpy.fromfile(s3.local["small"] + ".bin", numpy.uint16, count, offset=offset)
        numpy.testing.assert_array_equal(reader.read(numpy.uint16, count, offset), expected)
    # [floor(off/n)*n, max(start+n, off+size)) clipped to the object, one GET per miss
    last = (size - 6) // 1000 * 1000
    assert _gets(s3.proxy, "small.bin") == [
        "bytes=2000-2999",
        "bytes=0-1006",
        "bytes=4000-6999",
        f"bytes={last}-{size - 1}",
    ]
    assert reader.stats.requests == 4 and reader.stats.hits == 1


def test_lru_keeps_several_blocks(s3, tmp_path):
    config = storage_config(
        tmp_path, bin_chunk_nbytes=1000, max_cached_chunks=3, endpoint_url=s3.proxy.url
    )
    reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    for offset in (0, 1000, 2000, 0, 1000, 2000, 3000, 0):
        reader.read(numpy.uint8, 10, offset)
    # 0,1000,2000 fetched; 3000 evicts 0 (least recently used); 0 fetched again
    assert reader.stats.requests == 5 and reader.stats.hits == 3


def test_read_ahead_only_when_reading_forward(s3, tmp_path):
    config = storage_config(
        tmp_path, bin_chunk_nbytes=2000, read_ahead_chunks=2, endpoint_url=s3.proxy.url
    )
    reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    local = numpy.fromfile(s3.local["small"] + ".bin", numpy.uint8)
    for offset in range(0, 12000, 500):  # forward, block by block
        numpy.testing.assert_array_equal(
            reader.read(numpy.uint8, 100, offset), local[offset : offset + 100]
        )
    assert reader.stats.read_ahead >= 3
    assert reader.stats.bytes_fetched <= 12000 + 2 * 2000  # at most 2 blocks beyond
    reader.close()
    random_reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    for offset in (40000, 8000, 60000, 20000):
        random_reader.read(numpy.uint8, 10, offset)
    assert random_reader.stats.read_ahead == 0 and random_reader.stats.requests == 4


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_zero_length_read_sends_nothing(s3, tmp_path, scheme):
    config = storage_config(tmp_path)
    url = s3.remote["small"] + ".bin" if scheme == "s3" else s3.msc("small", proxy=True) + ".bin"
    remote = open_object(parse_url(url), config)
    s3.proxy.clear()
    assert remote.read_range(100, 100) == b""
    assert s3.proxy.requests() == []
    reader = ObjectBinReader(url, config)
    assert reader.read(numpy.uint16, 0, 64).shape == (0,)
    assert reader.stats.requests == 0


def test_msc_reads_are_ranged(s3, tmp_path):
    reader = ObjectBinReader(
        s3.msc("small", proxy=True) + ".bin", storage_config(tmp_path, bin_chunk_nbytes=1000)
    )
    expected = numpy.fromfile(s3.local["small"] + ".bin", numpy.uint16, 10, offset=3000)
    numpy.testing.assert_array_equal(reader.read(numpy.uint16, 10, 3000), expected)
    assert _gets(s3.proxy, "small.bin") == ["bytes=3000-3999"]


def test_out_of_range_read_names_url(s3, tmp_path):
    reader = ObjectBinReader(s3.remote["small"] + ".bin", storage_config(tmp_path))
    with pytest.raises(FormatError, match=r"s3://loom-data/corpora/small\.bin.*truncated"):
        reader.read(numpy.uint16, 10, reader.size - 4)


def test_replaced_object_is_detected_not_mixed(s3, tmp_path):
    client = s3.client()
    client.upload_file(s3.local["other"] + ".bin", BUCKET, "tmp/replaced.bin")
    reader = ObjectBinReader(
        f"s3://{BUCKET}/tmp/replaced.bin", storage_config(tmp_path, bin_chunk_nbytes=1000)
    )
    reader.read(numpy.uint8, 10, 0)
    client.upload_file(s3.local["small"] + ".bin", BUCKET, "tmp/replaced.bin")
    with pytest.raises(StorageError, match="replaced while it was being read"):
        reader.read(numpy.uint8, 10, 5000)


def test_exists_on_s3_and_msc(s3, tmp_path):
    assert IndexedDataset.exists(s3.remote["small"]) if _integrated() else True
    assert dataset_exists(s3.remote["small"]) and dataset_exists(s3.msc("small"))
    assert not dataset_exists(s3.remote["small"] + "-missing")
    assert not dataset_exists(s3.msc("small") + "-missing")
    assert not dataset_exists(f"s3://no-such-bucket-{id(s3)}/x")


def _integrated() -> bool:
    import inspect

    return "storage" in inspect.getsource(IndexedDataset.exists)


def test_forked_child_gets_its_own_client(s3, tmp_path):
    import multiprocessing

    from tokenloom.storage.clients import DEFAULT_POOL

    config = storage_config(tmp_path)
    reader = ObjectBinReader(s3.remote["small"] + ".bin", config)
    parent_client = id(DEFAULT_POOL.s3(config))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_read, args=(reader, config, queue))
    child.start()
    child.join(60)
    got, child_pool_size_before, same = queue.get(timeout=10)
    expected = numpy.fromfile(s3.local["small"] + ".bin", numpy.uint16, 50, offset=2000)
    numpy.testing.assert_array_equal(got, expected)
    assert child_pool_size_before == 0 and not same
    assert id(DEFAULT_POOL.s3(config)) == parent_client


def _child_read(reader, config, queue):
    from tokenloom.storage.clients import DEFAULT_POOL

    before = len(DEFAULT_POOL)
    data = reader.read(numpy.uint16, 50, 2000)
    queue.put((data, before, False))
