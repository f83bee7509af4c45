"""msc:// through a storage client that has only what megatron-core calls on it
(``read(path=, byte_range=)``): a real MSC client over the loopback S3 server, wrapped so
that ``info``, ``is_file``, ``download_file`` and ``upload_file`` are missing, handed
out by a patched ``multistorageclient.resolve_storage_client`` as megatron-core's tests
do."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.errors import FormatError, ObjectNotFoundError, StorageError
from tokenloom.format import IndexedDataset
from tokenloom.storage import ObjectBinReader, dataset_exists, fetch_index
from tokenloom.storage.open import open_object
from tokenloom.storage.urls import parse_url

pytestmark = pytest.mark.s3


class ReadOnlyClient:
    """megatron-core's contract for an MSC storage client: ``read`` and nothing else."""

    def __init__(self, client, calls: list) -> None:
        self._client, self._calls = client, calls

    def read(self, path, byte_range=None):
        self._calls.append((path, byte_range.offset, byte_range.size))
        return self._client.read(path, byte_range=byte_range)


@pytest.fixture
def read_only_msc(monkeypatch):
    """Every MSC client tokenloom resolves is a :class:`ReadOnlyClient`; yields its reads."""
    msc = pytest.importorskip("multistorageclient")
    real, calls = msc.resolve_storage_client, []

    def resolve(url):
        client, path = real(url)
        return ReadOnlyClient(client, calls), path

    monkeypatch.setattr(msc, "resolve_storage_client", resolve)
    return calls


@pytest.mark.timeout(120)
def test_a_client_with_only_read_serves_the_same_tokens(s3, tmp_path, read_only_msc):
    config = storage_config(tmp_path, bin_chunk_nbytes=4096)
    remote = IndexedDataset(s3.msc("small"), mmap=False, object_storage_config=config)
    local = IndexedDataset(s3.local["small"])
    assert len(remote) == len(local)
    for i in range(len(local)):
        numpy.testing.assert_array_equal(remote[i], local[i])
    assert remote.bin_reader.size is None  # without info() the size is not known
    with pytest.raises(FormatError, match=r"small\.bin.*(ends at byte|cannot read)"):
        remote.bin_reader.read(numpy.uint16, 10, os.path.getsize(s3.local["small"] + ".bin"))
    assert read_only_msc and all(size > 0 for _, _, size in read_only_msc)


@pytest.mark.timeout(120)
def test_the_index_cache_reuses_a_copy_whose_digest_matches(s3, tmp_path, read_only_msc):
    config = storage_config(tmp_path)
    url = s3.msc("other") + ".idx"
    local = fetch_index(url, config)
    with open(local, "rb") as copy, open(s3.local["other"] + ".idx", "rb") as original:
        assert copy.read() == original.read()
    written = os.stat(local).st_mtime_ns
    assert fetch_index(url, config) == local  # the ETag is the content's digest: reused
    assert os.stat(local).st_mtime_ns == written


def test_existence_and_clear_errors_without_info(s3, tmp_path, read_only_msc):
    config = storage_config(tmp_path)
    assert dataset_exists(s3.msc("small"), config)
    assert not dataset_exists(s3.msc("small") + "-missing", config)
    with pytest.raises(ObjectNotFoundError, match=r"small-missing\.bin"):
        ObjectBinReader(s3.msc("small") + "-missing.bin", config)
    target = open_object(parse_url(s3.msc("small") + "-copy.idx"), config)
    with pytest.raises(StorageError, match="has no upload_file"):
        target.upload(s3.local["small"] + ".idx")


def test_a_client_without_read_is_a_clear_error(s3, tmp_path, monkeypatch):
    msc = pytest.importorskip("multistorageclient")
    monkeypatch.setattr(msc, "resolve_storage_client", lambda url: (object(), url))
    config = storage_config(tmp_path)
    remote = open_object(parse_url(s3.msc("small") + ".bin"), config)
    with pytest.raises(StorageError, match=r"has no read\(path, byte_range\)"):
        remote.read_range(0, 10)
