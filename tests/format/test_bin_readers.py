"""The .bin readers: mmap, file pointer with retry/back-off, and the object-storage seam."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.format_files import write_dataset

from tokenloom.errors import ConfigError, FormatError
from tokenloom.format import (
    BinReader,
    FileBinReader,
    IndexedDataset,
    MMapBinReader,
    bin_readers,
    make_bin_reader,
    register_bin_reader,
)


@pytest.fixture
def bin_file(tmp_path):
    path = tmp_path / "t.bin"
    numpy.arange(100, dtype=numpy.int32).tofile(path)
    return str(path)


class FlakyReader(FileBinReader):
    """A real file reader whose first ``failures`` reads hit an I/O error."""

    def __init__(self, path, failures, **kwargs):
        super().__init__(path, **kwargs)
        self.failures = failures

    def _read_once(self, out, offset):
        if self.failures:
            self.failures -= 1
            raise OSError(5, "Input/output error (injected)")
        return super()._read_once(out, offset)


def test_file_reader_retries_with_exponential_back_off(bin_file, monkeypatch):
    sleeps = []
    monkeypatch.setattr(bin_readers.time, "sleep", sleeps.append)
    reader = FlakyReader(bin_file, failures=3, num_max_retries=3, sleep_duration_start=0.5)
    assert reader.read(numpy.int32, 3, 40).tolist() == [10, 11, 12]
    assert sleeps == [0.5, 1.0, 2.0]


def test_file_reader_gives_up_after_bounded_retries(bin_file, monkeypatch):
    sleeps = []
    monkeypatch.setattr(bin_readers.time, "sleep", sleeps.append)
    reader = FlakyReader(bin_file, failures=10, num_max_retries=2, sleep_duration_start=1)
    with pytest.raises(OSError, match="injected"):
        reader.read(numpy.int32, 3, 40)
    assert sleeps == [1, 2]


def test_short_read_is_a_format_error_without_retry(bin_file, monkeypatch):
    monkeypatch.setattr(bin_readers.time, "sleep", lambda s: pytest.fail("retried a short read"))
    for reader in (FileBinReader(bin_file), MMapBinReader(bin_file)):
        with pytest.raises(FormatError, match="t.bin: data file too short"):
            reader.read(numpy.int32, 10, 380)
        assert reader.size == 400


def test_file_reader_reopens_after_fork(bin_file):
    reader = FileBinReader(bin_file)
    assert reader.read(numpy.int32, 1, 0).tolist() == [0]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not share the parent's file position
        os.close(read_end)
        ok = reader.read(numpy.int32, 2, 8).tolist() == [2, 3]
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1"
    assert reader.read(numpy.int32, 1, 396).tolist() == [99]


def test_factory_chooses_reader(bin_file):
    assert isinstance(make_bin_reader(bin_file), MMapBinReader)
    assert isinstance(make_bin_reader(bin_file, mmap=False), FileBinReader)
    with pytest.raises(ConfigError, match="mmap=False"):
        make_bin_reader("s3://bucket/t.bin", mmap=True, object_storage_config=object())
    with pytest.raises(ConfigError, match="no reader for storage scheme 'nostore'"):
        make_bin_reader("nostore://bucket/t.bin", mmap=False, object_storage_config=object())


class DirectoryStore(BinReader):
    """A stand-in object store: ``dirstore://key`` maps to a local folder (real files)."""

    def __init__(self, path, config):
        self.path = path
        self._inner = FileBinReader(os.path.join(config.root, path.split("://", 1)[1]))

    def read(self, dtype, count, offset):
        return self._inner.read(dtype, count, offset)


def test_object_storage_seam(tmp_path):
    write_dataset(tmp_path / "remote" / "corpus", [[[1, 2]], [[3]]])

    class Config:
        root = str(tmp_path / "remote")
        path_to_idx_cache = str(tmp_path / "cache")

    def fetch(remote, local, config):
        os.makedirs(os.path.dirname(local), exist_ok=True)
        key = remote.split("://", 1)[1]
        with open(os.path.join(config.root, key), "rb") as src, open(local, "wb") as dst:
            dst.write(src.read())

    register_bin_reader("dirstore", DirectoryStore, fetch_index=fetch)
    dataset = IndexedDataset("dirstore://corpus", mmap=False, object_storage_config=Config())
    assert [s.tolist() for s in dataset] == [[1, 2], [3]]
    assert dataset.tokens is None
    assert (tmp_path / "cache" / "corpus.idx").exists()


def test_dict_object_storage_config_resolves_index_cache(tmp_path):
    local = bin_readers.resolve_index_path(
        "s3://bucket/data/x.idx", {"path_to_idx_cache": str(tmp_path)}
    )
    assert local == str(tmp_path / "bucket" / "data" / "x.idx")
    assert bin_readers.resolve_index_path("/plain/x.idx") == "/plain/x.idx"
    with pytest.raises(ConfigError, match="path_to_idx_cache"):
        bin_readers.resolve_index_path("s3://bucket/x.idx", {})
