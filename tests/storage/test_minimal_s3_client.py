"""s3:// through a client that has only what megatron-core calls on it, as megatron-core's
own tests (tests/unit_tests/data/test_bin_reader.py) hand one to ``boto3.client``: built
with positional arguments only, ``head_object`` answering ``{}`` (no size, no ETag),
``get_object(Bucket, Key, Range)`` answering a body without ``ContentLength``,
``download_file`` and ``close``; ``Bucket/Key`` is a local file.  Also a factory that
refuses keyword arguments in front of a real client of the loopback server."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.errors import FormatError, ObjectNotFoundError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.format.integrity import check_integrity, dataset_summary
from tokenloom.storage import clear_clients, dataset_exists, fetch_index, index_cache_path
from tokenloom.storage.bin_reader import S3BinReader

pytestmark = pytest.mark.s3


def _pair(prefix: Path, documents: int, seed: int) -> str:
    rng = numpy.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for _ in range(documents):
        builder.add_item(rng.integers(0, 30000, int(rng.integers(1, 300))).astype(numpy.uint16))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def _stand_in(root: str, calls: list):
    """A class like megatron-core's test client: objects are files under ``root``."""
    import botocore.exceptions

    class MegatronCallsOnly:
        def __init__(self, *args) -> None:  # positional only: config=... is a TypeError
            calls.append(("__init__", args))

        def _file(self, bucket: str, key: str, operation: str) -> str:
            path = os.path.join(root, bucket, key)
            if not os.path.isfile(path):
                raise botocore.exceptions.ClientError(
                    {"Error": {"Code": "404"}, "ResponseMetadata": {"HTTPStatusCode": 404}},
                    operation,
                )
            return path

        def head_object(self, Bucket, Key):  # noqa: N803 - boto3's argument names
            calls.append(("head_object", Key))
            self._file(Bucket, Key, "HeadObject")
            return {}

        def get_object(self, Bucket, Key, Range):  # noqa: N803
            calls.append(("get_object", Key, Range))
            begin, end = map(int, Range.removeprefix("bytes=").split("-"))
            with open(self._file(Bucket, Key, "GetObject"), "rb") as handle:
                handle.seek(begin)
                data = handle.read(end - begin + 1)  # HTTP ranges include their end
            return {"Body": SimpleNamespace(read=lambda: data)}

        def download_file(self, Bucket, Key, Filename):  # noqa: N803
            calls.append(("download_file", Key))
            shutil.copyfile(self._file(Bucket, Key, "HeadObject"), Filename)

        def close(self) -> None:
            calls.append(("close",))

    return MegatronCallsOnly


@pytest.fixture
def minimal(monkeypatch, tmp_path):
    """``boto3.client`` is the stand-in over files under ``tmp_path/root``; yields its calls."""
    boto3 = pytest.importorskip("boto3")
    calls: list = []
    monkeypatch.setattr(boto3, "client", _stand_in(str(tmp_path / "root"), calls))
    clear_clients()  # no client made before the patch is reused
    yield calls
    clear_clients()


@pytest.mark.timeout(120)
def test_an_empty_bucket_over_local_files_reads_the_local_tokens(tmp_path, minimal):
    local_prefix = _pair(tmp_path / "data" / "numbers_text_document", 150, 1)
    config = storage_config(tmp_path, bin_chunk_nbytes=4096)
    # megatron-core's test: s3:// + an absolute local prefix, a client rooted at "/"
    (tmp_path / "root").symlink_to("/")
    url = "s3://" + local_prefix
    remote = IndexedDataset(url, mmap=False, object_storage_config=config)
    local = IndexedDataset(local_prefix)
    assert isinstance(remote.bin_reader, S3BinReader)
    assert len(remote) == len(local)
    for i in range(len(local)):
        numpy.testing.assert_array_equal(remote[i], local[i])
    cached = index_cache_path(url + ".idx", config.path_to_idx_cache)
    assert cached == os.path.join(config.path_to_idx_cache, local_prefix.lstrip("/") + ".idx")
    assert Path(cached).read_bytes() == Path(local_prefix + ".idx").read_bytes()
    assert remote.bin_reader.size is None  # the HEAD told no size
    with pytest.raises(FormatError, match=r"numbers_text_document\.bin.*ends at byte"):
        remote.bin_reader.read(numpy.uint16, 10, os.path.getsize(local_prefix + ".bin"))
    used = {call[0] for call in minimal}
    assert used <= {"__init__", "head_object", "get_object", "download_file", "close"}
    assert ("__init__", ("s3",)) in minimal  # megatron-core's call, boto3.client("s3")


@pytest.mark.timeout(120)
def test_a_client_without_content_length_or_etag(tmp_path, minimal):
    root = tmp_path / "root" / "my-bucket" / "corpora"
    root.mkdir(parents=True)
    first = _pair(root / "d", 120, 2)
    other = _pair(tmp_path / "other", 80, 3)
    config = storage_config(tmp_path, bin_chunk_nbytes=1000)
    url = "s3://my-bucket/corpora/d"
    assert dataset_exists(url, config) and not dataset_exists(url + "-missing", config)
    with pytest.raises(ObjectNotFoundError, match=r"d-missing\.idx"):
        IndexedDataset(url + "-missing", mmap=False, object_storage_config=config)

    remote = IndexedDataset(url, mmap=False, object_storage_config=config)
    local = IndexedDataset(first)
    for i in range(len(local)):  # blocks of 1000 bytes, the end learnt from a short answer
        numpy.testing.assert_array_equal(remote[i], local[i])
    gets = [call[1:] for call in minimal if call[0] == "get_object"]
    assert gets[0] == ("corpora/d.bin", "bytes=0-999")
    starts = [int(range_.removeprefix("bytes=").split("-")[0]) for _, range_ in gets]
    assert all(start % 1000 == 0 for start in starts)  # megatron-core's aligned blocks
    assert len(gets) <= len(local)  # at most one GET per read
    # the integrity check reads the .bin through for its size (the HEAD told none)
    assert check_integrity(remote) == []
    assert dataset_summary(remote)["bin_bytes"] == os.path.getsize(first + ".bin")

    cached = fetch_index(url + ".idx", config)  # the content's digest stands in for the ETag
    written = os.stat(cached).st_mtime_ns
    assert fetch_index(url + ".idx", config) == cached
    assert os.stat(cached).st_mtime_ns == written  # same content: the copy is kept
    assert '"etag": "content-blake2b-128:' in Path(cached + ".etag.json").read_text()
    shutil.copyfile(other + ".idx", first + ".idx")  # the object is replaced
    fetch_index(url + ".idx", config)
    assert Path(cached).read_bytes() == Path(other + ".idx").read_bytes()
    assert [c for c in minimal if c[0] == "download_file"]  # megatron-core's .idx call


def _keyword_refusing(calls: list):
    """A factory like megatron-core's test client (``__init__(self, *args)``) in front of
    a real boto3 client of the loopback server (its endpoint from AWS_ENDPOINT_URL)."""
    import boto3

    real = boto3.client

    class KeywordRefusing:
        def __init__(self, *args) -> None:
            calls.append(args)
            self._client = real(*args)

        def __getattr__(self, name):
            return getattr(self._client, name)

    return KeywordRefusing


@pytest.mark.timeout(120)
def test_a_factory_that_refuses_keyword_arguments(s3, tmp_path, monkeypatch, caplog):
    import boto3

    calls: list = []
    monkeypatch.setattr(boto3, "client", _keyword_refusing(calls))
    clear_clients()
    try:
        config = storage_config(tmp_path, bin_chunk_nbytes=4096)
        remote = IndexedDataset(s3.remote["small"], mmap=False, object_storage_config=config)
        local = IndexedDataset(s3.local["small"])
        for i in range(len(local)):
            numpy.testing.assert_array_equal(remote[i], local[i])
        assert remote.bin_reader.size == os.path.getsize(s3.local["small"] + ".bin")
        assert calls == [("s3",)]  # megatron-core's call, once per process
        pid = os.fork()
        if pid == 0:  # a child makes its own client through the same fallback
            code = 1
            try:
                numpy.testing.assert_array_equal(remote[3], local[3])
                code = 0 if calls == [("s3",), ("s3",)] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with caplog.at_level(logging.WARNING, logger="tokenloom.storage"):
            named = storage_config(tmp_path, endpoint_url=s3.endpoint)
            IndexedDataset(s3.remote["other"], mmap=False, object_storage_config=named)
        assert any("endpoint_url=" in r.getMessage() for r in caplog.records)
    finally:
        clear_clients()
