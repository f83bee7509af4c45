"""Mapped files hold no open file descriptor (10,000 prefixes must fit the open-file limit)."""

from __future__ import annotations

import gc
import os
import pickle

import numpy
import pytest
from tests.support.format_files import random_documents, write_dataset

from tokenloom.format import IndexedDataset
from tokenloom.format._mapping import holds_descriptor, map_array

pytestmark = [
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd"),
    pytest.mark.skipif(holds_descriptor(), reason="no fd-free mapping on this platform"),
]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mappings_of(path: str) -> int:
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip().endswith(os.path.realpath(path)) for line in maps)


@pytest.fixture
def prefix(tmp_path):
    return write_dataset(tmp_path / "data", random_documents(seed=3, num_documents=40))


def test_three_hundred_open_datasets_hold_no_descriptors(prefix):
    before = open_fds()
    datasets = [IndexedDataset(prefix) for _ in range(300)]
    assert open_fds() - before <= 3  # ~2 per dataset with mmap.mmap's duplicated fd
    reference = [datasets[0][i].tolist() for i in range(len(datasets[0]))]
    assert [datasets[-1][i].tolist() for i in range(len(datasets[-1]))] == reference
    copy = pickle.loads(pickle.dumps(datasets[7]))  # pickling reopens by path
    assert [copy[i].tolist() for i in range(len(copy))] == reference
    assert open_fds() - before <= 3


def test_views_outlive_close_and_the_mapping_goes_with_the_last_view(prefix):
    dataset = IndexedDataset(prefix)
    tokens, lengths, first = dataset.tokens, dataset.sequence_lengths, dataset[0]
    expected = (int(tokens.sum()), lengths.tolist(), first.tolist())
    assert mappings_of(prefix + ".bin") == 1 and mappings_of(prefix + ".idx") == 1
    dataset.close()
    del dataset
    gc.collect()
    assert (int(tokens.sum()), lengths.tolist(), first.tolist()) == expected
    assert not tokens.flags.writeable and not first.flags.writeable
    with pytest.raises(ValueError):
        first[0] = 1
    del tokens, first
    gc.collect()
    assert mappings_of(prefix + ".bin") == 0  # unmapped: no leak of address space
    assert mappings_of(prefix + ".idx") == 1  # ``lengths`` still views the .idx
    del lengths
    gc.collect()
    assert mappings_of(prefix + ".idx") == 0


def test_map_array_reads_npy_like_memmap_without_a_descriptor(tmp_path):
    path = str(tmp_path / "a.npy")
    values = numpy.arange(60, dtype=numpy.int32).reshape(20, 3) * 7
    numpy.save(path, values)
    offset = numpy.load(path, mmap_mode="r").offset
    before = open_fds()
    arrays = [map_array(path, numpy.int32, (20, 3), offset) for _ in range(50)]
    assert open_fds() == before
    numpy.testing.assert_array_equal(arrays[-1], values)
    assert arrays[0].shape == (20, 3) and not arrays[0].flags.writeable
    with pytest.raises(ValueError, match="too short"):
        map_array(path, numpy.int32, (21, 3), offset)
    assert map_array(path, numpy.int64, (0,), offset).shape == (0,)
