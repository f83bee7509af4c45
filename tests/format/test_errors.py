"""Corrupted or mismatched files get a FormatError naming the file and the problem."""

from __future__ import annotations

import struct

import numpy
import pytest
from tests.support.format_files import write_dataset

from tokenloom.errors import FormatError
from tokenloom.format import (
    IndexedDataset,
    IndexedDatasetBuilder,
    MissingFileError,
    read_index_header,
)

DOCUMENTS = [[[1, 2, 3], [4]], [[5, 6]], [[7]]]  # 4 sequences, 3 documents


@pytest.fixture
def prefix(tmp_path):
    return write_dataset(tmp_path / "data", DOCUMENTS)


def _patch(path, offset, data):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _open_fails(prefix, match, **kwargs):
    with pytest.raises(FormatError, match=match) as caught:
        IndexedDataset(prefix, **kwargs)
    assert not isinstance(caught.value, AssertionError)
    return str(caught.value)


def test_wrong_magic(prefix):
    _patch(prefix + ".idx", 0, b"NOTANIDX\x00")
    message = _open_fails(prefix, "not an MMIDIDX index file")
    assert "data.idx" in message
    with pytest.raises(FormatError, match="not an MMIDIDX"):
        read_index_header(prefix + ".idx")


def test_wrong_version(prefix):
    _patch(prefix + ".idx", 9, struct.pack("<Q", 2))
    assert "data.idx" in _open_fails(prefix, "unsupported index version 2")


@pytest.mark.parametrize("code", [0, 9, 255])
def test_unknown_dtype_code(prefix, code):
    _patch(prefix + ".idx", 17, struct.pack("<B", code))
    assert "data.idx" in _open_fails(prefix, f"unknown dtype code {code}")


@pytest.mark.parametrize("keep", [0, 5, 20, 34, 60, -1])
def test_truncated_index(prefix, keep):
    data = open(prefix + ".idx", "rb").read()
    open(prefix + ".idx", "wb").write(data[:keep] if keep >= 0 else data[:-1])
    message = _open_fails(prefix, "truncated index file")
    assert "data.idx" in message


def test_trailing_garbage_in_index(prefix):
    with open(prefix + ".idx", "ab") as handle:
        handle.write(b"\x00" * 3)
    _open_fails(prefix, "expected")


def test_multimodal_asked_of_plain_file(prefix):
    _open_fails(prefix, "really multimodal", multimodal=True)


@pytest.mark.parametrize("mmap", [True, False])
def test_bin_shorter_than_index_says(prefix, mmap):
    data = open(prefix + ".bin", "rb").read()
    open(prefix + ".bin", "wb").write(data[:-2])
    message = _open_fails(prefix, "data file is 12 bytes", mmap=mmap)
    assert "data.bin" in message


def _document_offset(prefix):
    sequences = 4
    return 34 + 4 * sequences + 8 * sequences


@pytest.mark.parametrize(
    "values, match",
    [
        ([0, 3, 2, 4], "not monotone: entry 2 is 2 after 3"),
        ([1, 2, 3, 4], "start at 0"),
        ([0, 2, 3, 3], "end at the sequence count 4"),
    ],
)
def test_bad_document_indices(prefix, values, match):
    _patch(prefix + ".idx", _document_offset(prefix), numpy.array(values, numpy.int64).tobytes())
    assert "data.idx" in _open_fails(prefix, match)


def test_missing_files(tmp_path, prefix):
    with pytest.raises(MissingFileError, match="nothing.idx") as caught:
        IndexedDataset(str(tmp_path / "nothing"))
    assert isinstance(caught.value, FileNotFoundError)
    import os

    os.unlink(prefix + ".bin")
    for mmap in (True, False):
        with pytest.raises(MissingFileError, match="data.bin"):
            IndexedDataset(prefix, mmap=mmap)
    with pytest.raises(MissingFileError, match="other.idx"):
        read_index_header(str(tmp_path / "other.idx"))


@pytest.mark.parametrize("mmap", [True, False])
def test_reads_past_the_end(prefix, mmap):
    dataset = IndexedDataset(prefix, mmap=mmap)
    for call in (
        lambda: dataset[4],
        lambda: dataset[-5],
        lambda: dataset.get(99),
        lambda: dataset.get(0, offset=4),
        lambda: dataset.get(0, offset=1, length=3),
        lambda: dataset.get(0, offset=-1),
        lambda: dataset.get(0, length=-1),
    ):
        with pytest.raises(FormatError, match="data") as caught:
            call()
        assert isinstance(caught.value, IndexError)
    assert dataset.get(0, offset=3).tolist() == []


def test_pointer_beyond_bin_is_caught_on_read(prefix):
    _patch(prefix + ".idx", 34 + 16 + 8, struct.pack("<q", 6))  # sequence 1 -> byte 6
    dataset = IndexedDataset(prefix)
    assert dataset[1].tolist() == [4]  # still inside the file: the pointer is obeyed
    _patch(prefix + ".idx", 34 + 16 + 8, struct.pack("<q", 3))  # misaligned
    with pytest.raises(FormatError, match="disagree"):
        IndexedDataset(prefix)[1]


def test_merge_with_other_dtype_or_modality(tmp_path, prefix):
    wide = write_dataset(tmp_path / "wide", DOCUMENTS, numpy.int32)
    multimodal = write_dataset(tmp_path / "mm", [[([1], 2)]], multimodal=True)
    builder = IndexedDatasetBuilder(tmp_path / "out.bin", dtype=numpy.uint16)
    with pytest.raises(FormatError, match="wide.idx: cannot merge: its tokens are int32"):
        builder.add_index(wide)
    with pytest.raises(FormatError, match="mm.idx: cannot merge: the dataset is multimodal"):
        builder.add_index(multimodal)
    builder_mm = IndexedDatasetBuilder(tmp_path / "out2.bin", dtype=numpy.uint16, multimodal=True)
    with pytest.raises(FormatError, match="data.idx: cannot merge: the dataset is not multimodal"):
        builder_mm.add_index(prefix)
    builder.add_index(prefix)  # a failed merge left the builder usable
    builder.finalize(tmp_path / "out.idx")
    assert [s.tolist() for s in IndexedDataset(str(tmp_path / "out"))] == [
        [1, 2, 3],
        [4],
        [5, 6],
        [7],
    ]


def test_merge_of_corrupt_source(tmp_path, prefix):
    with open(prefix + ".bin", "ab") as handle:
        handle.write(b"\x00\x00")
    builder = IndexedDatasetBuilder(tmp_path / "out.bin", dtype=numpy.uint16)
    with pytest.raises(FormatError, match="data.bin: cannot merge: data file is 16 bytes"):
        builder.add_index(prefix)
    with pytest.raises(MissingFileError):
        builder.add_index(str(tmp_path / "absent"))


@pytest.mark.parametrize("count", [5, 256, 257, 1000])  # both sides of the Python check
def test_a_non_monotone_document_index_is_named_at_any_length(count):
    from tokenloom.errors import FormatError
    from tokenloom.format.index_file import check_document_indices

    values = numpy.arange(count, dtype=numpy.int64)
    values[count // 2] = values[count // 2 - 2]  # a drop after entry count // 2 - 1
    at = count // 2
    with pytest.raises(FormatError, match=f"entry {at} is {at - 2} after {at - 1}"):
        check_document_indices(values, count - 1, "x.idx")
    check_document_indices(numpy.arange(count, dtype=numpy.int64), count - 1, "x.idx")
