"""The .bin readers: mmap, file pointer with retry/back-off; local paths only (object
storage goes through tokenloom.format.remote, tests/storage)."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.format_files import write_dataset

from tokenloom.errors import ConfigError, FormatError
from tokenloom.format import (
    FileBinReader,
    IndexedDataset,
    MMapBinReader,
    make_bin_reader,
    pread_reader,
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
    monkeypatch.setattr(pread_reader.time, "sleep", sleeps.append)
    reader = FlakyReader(bin_file, failures=3, num_max_retries=3, sleep_duration_start=0.5)
    assert reader.read(numpy.int32, 3, 40).tolist() == [10, 11, 12]
    assert sleeps == [0.5, 1.0, 2.0]


def test_file_reader_gives_up_after_bounded_retries(bin_file, monkeypatch):
    sleeps = []
    monkeypatch.setattr(pread_reader.time, "sleep", sleeps.append)
    reader = FlakyReader(bin_file, failures=10, num_max_retries=2, sleep_duration_start=1)
    with pytest.raises(OSError, match="injected"):
        reader.read(numpy.int32, 3, 40)
    assert sleeps == [1, 2]


def test_short_read_is_a_format_error_without_retry(bin_file, monkeypatch):
    monkeypatch.setattr(pread_reader.time, "sleep", lambda s: pytest.fail("retried a short read"))
    for reader in (FileBinReader(bin_file), MMapBinReader(bin_file)):
        with pytest.raises(FormatError, match="t.bin: data file too short"):
            reader.read(numpy.int32, 10, 380)
        assert reader.size == 400


@pytest.mark.processes
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
    with pytest.raises(ConfigError, match="object_storage_config is given for a local path"):
        make_bin_reader(bin_file, mmap=False, object_storage_config=object())
    with pytest.raises(ConfigError, match="no reader for storage scheme 'nostore'"):
        make_bin_reader("nostore://bucket/t.bin", mmap=False)


def test_a_local_open_refuses_urls_and_storage_configs_before_reading(tmp_path):
    prefix = write_dataset(tmp_path / "corpus", [[[1, 2]], [[3]]])
    with pytest.raises(ConfigError, match=r"gs://bucket/corpus: no reader for storage scheme 'gs'"):
        IndexedDataset("gs://bucket/corpus", mmap=False)
    for mmap in (True, False):
        with pytest.raises(ConfigError, match="object_storage_config is given for a local path"):
            IndexedDataset(prefix, mmap=mmap, object_storage_config={"path_to_idx_cache": "x"})
    assert [s.tolist() for s in IndexedDataset(prefix, mmap=False)] == [[1, 2], [3]]
