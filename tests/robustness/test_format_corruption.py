"""Corrupted, truncated and irregular .bin/.idx files: only clear FormatErrors come out.

Every test opens a real pair written by IndexedDatasetBuilder, damages it on disk and
checks that IndexedDataset (open, [i], get, slices), the integrity check behind
``tokenloom inspect`` and GPTDataset samples either give correct data or raise a
tokenloom error naming the file, never a bare numpy/struct/OS error or a wrong sample.
"""

from __future__ import annotations

import os
import struct

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.dataset_files import small_config, write_corpus
from tests.support.format_files import random_documents, write_dataset

from tokenloom.cli.main import main
from tokenloom.datasets import GPTDataset, Split
from tokenloom.errors import FormatError, TokenloomError
from tokenloom.format import IndexedDataset, MissingFileError
from tokenloom.format.integrity import check_integrity, dataset_summary, open_for_inspection

LENGTHS_AT = 34  # the int32 lengths follow the 34-byte header


def _pair(tmp_path, name="base"):
    prefix = write_dataset(tmp_path / name, random_documents(seed=3, num_documents=8))
    with open(prefix + ".idx", "rb") as handle:
        idx = handle.read()
    with open(prefix + ".bin", "rb") as handle:
        data = handle.read()
    return prefix, idx, data


def _write(prefix, idx, data):
    with open(f"{prefix}.idx", "wb") as handle:
        handle.write(idx)
    with open(f"{prefix}.bin", "wb") as handle:
        handle.write(data)
    return str(prefix)


def _read_everything(prefix, mmap=True):
    """Read a pair every way; check items, slices and lengths agree."""
    with IndexedDataset(prefix, mmap=mmap) as dataset:
        lengths = dataset.sequence_lengths
        items = [dataset[i] for i in range(len(dataset))]
        assert [item.shape[0] for item in items] == lengths.tolist()
        for item, part in zip(items, dataset[:]):
            numpy.testing.assert_array_equal(item, part)
        check_integrity(dataset, vocab_size=1000)
        dataset_summary(dataset)


def _patch(idx, offset, fmt, value):
    data = bytearray(idx)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
    mmap=st.booleans(),
)
def test_random_idx_byte_flips_give_format_error_or_valid_data(tmp_path, flips, mmap):
    prefix, idx, data = _pair(tmp_path)
    damaged = bytearray(idx)
    for position, xor in flips:
        damaged[position % len(damaged)] ^= xor
    _write(prefix, bytes(damaged), data)
    try:
        _read_everything(prefix, mmap=mmap)
    except TokenloomError:
        pass


@pytest.mark.parametrize(
    "field, fmt, value",
    [
        ("sequence count", "<Q", 2**63),
        ("sequence count", "<Q", 2**64 - 1),
        ("document count", "<Q", 2**62),
        ("version", "<Q", 2),
        ("dtype code", "<B", 0),
    ],
)
def test_huge_or_bad_header_fields_are_refused_without_allocating(tmp_path, field, fmt, value):
    prefix, idx, data = _pair(tmp_path)
    offset = {"version": 9, "dtype code": 17, "sequence count": 18, "document count": 26}[field]
    _write(prefix, _patch(idx, offset, fmt, value), data)
    with pytest.raises(FormatError, match=r"\.idx"):
        IndexedDataset(prefix)


def test_negative_sequence_length_is_a_format_error_for_get_and_slices(tmp_path):
    prefix, idx, data = _pair(tmp_path)
    count = struct.unpack_from("<Q", idx, 18)[0]
    lengths = numpy.frombuffer(idx, numpy.int32, count, LENGTHS_AT)
    # sequence 1 gets -lengths[2] so that a slice over 0..2 would have an unchanged sum
    _write(prefix, _patch(idx, LENGTHS_AT + 4, "<i", -int(lengths[2]) or -1), data)
    with pytest.raises(FormatError, match=r"sequence 1 has negative length"):
        IndexedDataset(prefix)  # caught at open
    with IndexedDataset(prefix, fast_cache_load=True) as dataset:  # trusted: caught on read
        with pytest.raises(FormatError, match=r"sequence 1 has negative length"):
            dataset[1]
        with pytest.raises(FormatError, match=r"negative length"):
            dataset[0:3]
        assert dataset[2:3][0].shape[0] == lengths[2]


@pytest.mark.parametrize("kind", ["directory", "fifo"])
@pytest.mark.parametrize("which", ["idx", "bin"])
@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.timeout(30)
def test_directory_or_fifo_instead_of_a_file(tmp_path, kind, which, mmap):
    prefix, idx, data = _pair(tmp_path)
    target = f"{prefix}.{which}"
    os.remove(target)
    os.mkdir(target) if kind == "directory" else os.mkfifo(target)
    with pytest.raises(FormatError, match=rf"{target}: the (index|data) file is"):
        IndexedDataset(prefix, mmap=mmap)


def test_dangling_symlink_is_a_missing_file(tmp_path):
    prefix, idx, data = _pair(tmp_path)
    os.remove(prefix + ".bin")
    os.symlink(tmp_path / "nowhere.bin", prefix + ".bin")
    with pytest.raises(MissingFileError, match=r"nowhere|base\.bin"):
        IndexedDataset(prefix)


def test_symlinked_pair_reads_like_the_original(tmp_path):
    prefix, idx, data = _pair(tmp_path)
    for suffix in (".idx", ".bin"):
        os.symlink(prefix + suffix, str(tmp_path / "link") + suffix)
    with IndexedDataset(prefix) as original, IndexedDataset(str(tmp_path / "link")) as linked:
        numpy.testing.assert_array_equal(
            numpy.concatenate(original[:]), numpy.concatenate(linked[:])
        )


@pytest.mark.parametrize("damage", ["empty idx", "empty bin", "garbage idx", "truncated bin"])
def test_inspect_reports_damage_with_exit_1(tmp_path, capsys, damage):
    prefix, idx, data = _pair(tmp_path)
    idx, data = {
        "empty idx": (b"", data),
        "empty bin": (idx, b""),
        "garbage idx": (os.urandom(len(idx)), data),
        "truncated bin": (idx, data[:-3]),
    }[damage]
    _write(prefix, idx, data)
    assert main(["inspect", prefix]) == 1
    assert main(["inspect", prefix, "--json"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_get_offset_and_length_must_be_integers(tmp_path):
    prefix, _, _ = _pair(tmp_path)
    with IndexedDataset(prefix) as dataset:
        with pytest.raises(TypeError, match="offset must be an integer"):
            dataset.get(0, offset=1.5)
        with pytest.raises(TypeError, match="length must be an integer"):
            dataset.get(0, length=numpy.float32(2))
        numpy.testing.assert_array_equal(
            dataset.get(0, numpy.int64(1), numpy.int8(2)), dataset[0][1:3]
        )


@pytest.mark.parametrize("numba", ["1", "0"])
@pytest.mark.parametrize(
    "field, value",
    [("pointer", 10**9), ("pointer", 81), ("pointer", -80), ("length", 10**6), ("length", -30)],
)
def test_gpt_samples_from_a_corrupt_idx_are_refused(tmp_path, monkeypatch, numba, field, value):
    """A pointer past the .bin, misaligned or negative (or a length that runs past it)
    must not give a wrong sample or a bare numba/numpy error."""
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", numba)
    prefix = write_corpus(tmp_path / "corpus", [40] * 30)
    with open(prefix + ".idx", "rb") as handle:
        idx = handle.read()
    offset = LENGTHS_AT + (4 * 3 if field == "length" else 4 * 30 + 8 * 3)
    with open(prefix + ".idx", "wb") as handle:
        handle.write(_patch(idx, offset, "<i" if field == "length" else "<q", value))
    config = small_config(prefix, None)
    with pytest.raises(FormatError, match=r"corpus\.idx.*sequence 3|sequence 3 has negative"):
        low = GPTDataset.build_low_level_dataset(prefix, config)
        dataset = GPTDataset(low, prefix, numpy.arange(30), None, Split.train, config)
        for i in range(len(dataset)):
            dataset[i]
        dataset.get_batch(range(len(dataset)))


def test_open_for_inspection_of_missing_prefix(tmp_path):
    with pytest.raises(MissingFileError, match="does not exist"):
        open_for_inspection(str(tmp_path / "nope"))
