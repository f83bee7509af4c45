"""64-bit offsets: a sparse .bin of more than 2**31 tokens indexes correctly."""

from __future__ import annotations

import numpy
import pytest

from tokenloom.format import IndexedDataset, get_bin_path, get_idx_path
from tokenloom.format.spec import write_index

TOKENS_PER_SEQUENCE = 2**30  # three sequences: 3 * 2**30 uint16 tokens = 6 GiB of bytes


def _sparse_dataset(tmp_path):
    prefix = str(tmp_path / "huge")
    lengths = numpy.full(3, TOKENS_PER_SEQUENCE, dtype=numpy.int32)
    lengths[2] = 5
    with open(get_idx_path(prefix), "wb") as handle:
        write_index(handle, numpy.uint16, lengths, numpy.array([0, 2, 3]))
    total = int(lengths.sum(dtype=numpy.int64))
    markers = {
        0: 11,
        TOKENS_PER_SEQUENCE - 1: 12,
        TOKENS_PER_SEQUENCE: 21,
        2 * TOKENS_PER_SEQUENCE: 31,
        total - 1: 35,
    }
    with open(get_bin_path(prefix), "wb") as handle:
        handle.truncate(total * 2)  # sparse: costs no disk space
        for position, value in markers.items():
            handle.seek(position * 2)
            handle.write(numpy.uint16(value).tobytes())
    return prefix, total


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "file"])
def test_more_than_2_pow_31_tokens(tmp_path, mmap):
    try:
        prefix, total = _sparse_dataset(tmp_path)
    except OSError as error:  # pragma: no cover - file system without sparse files
        pytest.skip(f"cannot create a sparse 6 GiB file here: {error}")
    assert total > 2**31
    dataset = IndexedDataset(prefix, mmap=mmap)
    assert dataset.sequence_pointers.tolist() == [0, 2**31, 2**32]
    assert dataset.get(0, offset=0, length=1).tolist() == [11]
    assert dataset.get(0, offset=TOKENS_PER_SEQUENCE - 1).tolist() == [12]
    assert dataset.get(1, length=2).tolist() == [21, 0]
    assert dataset[2].tolist() == [31, 0, 0, 0, 35]
    assert dataset[2:3][0].tolist() == [31, 0, 0, 0, 35]
    if mmap:
        tokens = dataset.tokens
        assert tokens.shape == (total,)
        assert tokens[[0, 2 * TOKENS_PER_SEQUENCE, total - 1]].tolist() == [11, 31, 35]
