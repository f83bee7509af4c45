"""Property tests of the block cache against an in-memory object: any sequence of
reads, any chunk size, cache size and read-ahead returns exactly the bytes asked for,
and every request is Megatron's aligned block."""

from __future__ import annotations

import threading

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.storage import ObjectInfo, ObjectStorageConfig, RemoteObject, parse_url
from tokenloom.storage.bin_reader import ObjectBinReader, aligned_block


class MemoryObject(RemoteObject):
    """An object held in memory that records the ranges asked for."""

    def __init__(self, data: bytes) -> None:
        self.url = parse_url("s3://mem/object.bin")
        self.config = ObjectStorageConfig("/unused")
        self.data = data
        self.ranges: list = []
        self.lock = threading.Lock()

    def head(self) -> ObjectInfo:
        return ObjectInfo(len(self.data), '"etag"')

    def read_range(self, start, end, etag=None) -> bytes:
        with self.lock:
            self.ranges.append((start, end))
        return self.data[start:end]

    def download(self, local_path):  # pragma: no cover - not used here
        raise NotImplementedError

    def upload(self, local_path):  # pragma: no cover - not used here
        raise NotImplementedError


def test_aligned_block_examples():
    assert aligned_block(2500, 10, 1000, 10**6) == (2000, 3000)
    assert aligned_block(999, 8, 1000, 10**6) == (0, 1007)  # extended past the block
    assert aligned_block(9990, 5, 1000, 9995) == (9000, 9995)  # clipped to the object


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 5000),
    chunk=st.integers(1, 700),
    cached=st.integers(1, 4),
    ahead=st.integers(0, 3),
    data=st.data(),
)
def test_reads_return_exact_bytes_and_request_aligned_blocks(size, chunk, cached, ahead, data):
    raw = numpy.random.default_rng(size).integers(0, 256, size, dtype=numpy.uint8).tobytes()
    remote = MemoryObject(raw)
    config = ObjectStorageConfig(
        "/unused", bin_chunk_nbytes=chunk, max_cached_chunks=cached, read_ahead_chunks=ahead
    )
    reader = ObjectBinReader("s3://mem/object.bin", config, remote=remote)
    reads = data.draw(
        st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 300)), min_size=1, max_size=25)
    )
    for offset, count in reads:
        count = min(count, size - offset)
        got = reader.read(numpy.uint8, count, offset)
        assert got.tobytes() == raw[offset : offset + count]
    reader.close()
    for start, end in remote.ranges:
        assert start % chunk == 0 and start < end <= size
        assert end - start <= max(chunk, 300 + chunk)
    assert reader.stats.bytes_fetched == sum(e - s for s, e in remote.ranges)


def test_threads_share_one_reader():
    raw = bytes(range(256)) * 400
    reader = ObjectBinReader(
        "s3://mem/object.bin",
        ObjectStorageConfig(
            "/unused", bin_chunk_nbytes=512, max_cached_chunks=2, read_ahead_chunks=2
        ),
        remote=MemoryObject(raw),
    )
    errors: list = []

    def work(seed: int) -> None:
        rng = numpy.random.default_rng(seed)
        for _ in range(300):
            offset = int(rng.integers(0, len(raw) - 64))
            if reader.read(numpy.uint8, 64, offset).tobytes() != raw[offset : offset + 64]:
                errors.append(offset)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    reader.close()
    assert errors == []
