"""``LazyIndexedDataset`` wraps an ``IndexedDataset`` (composition): it answers from known
facts without opening, opens on first read, releases and reopens, and refuses files
that changed since the facts were taken."""

from __future__ import annotations

import os
import pickle

import numpy
import pytest

from tokenloom.errors import FormatError
from tokenloom.format import (
    DType,
    IndexedDataset,
    IndexedDatasetBuilder,
    LazyIndexedDataset,
    PairFacts,
    file_identity,
)
from tokenloom.format.identity import DIGEST_NAME, stat_key
from tokenloom.format.index_file import IndexFile


def _write(prefix: str, lengths=(5, 9, 2, 7), seed: int = 0) -> str:
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    rng = numpy.random.default_rng(seed)
    for length in lengths:
        builder.add_item(rng.integers(1, 60000, size=length))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def _facts(prefix: str) -> PairFacts:
    with IndexedDataset(prefix) as dataset:
        identity = file_identity(prefix)
        return PairFacts(
            prefix,
            os.path.abspath(prefix + ".idx"),
            stat_key(os.stat(prefix + ".idx")),
            DType.code_from_dtype(dataset.dtype),
            len(dataset),
            int(dataset.document_indices.shape[0]),
            str(identity["idx"][DIGEST_NAME]),
            int(identity["bin"]["size"]),
            int(identity["bin"]["mtime_ns"]),
        )


def test_known_facts_answer_without_opening_then_reads_open(tmp_path):
    prefix = _write(str(tmp_path / "p"))
    lazy = LazyIndexedDataset(_facts(prefix))
    assert not isinstance(lazy, IndexedDataset)  # wraps one, is not one
    assert len(lazy) == 4 and lazy.dtype is numpy.uint16 and not lazy.opened
    assert lazy.file_identity() == file_identity(prefix) and not lazy.opened
    with IndexedDataset(prefix) as plain:
        numpy.testing.assert_array_equal(lazy[2], plain[2])
        assert lazy.opened
        numpy.testing.assert_array_equal(lazy.sequence_lengths, plain.sequence_lengths)
        assert lazy.file_identity() == lazy.dataset().file_identity()
    lazy.release()
    assert not lazy.opened and lazy.get(1, offset=2).shape == (7,) and lazy.opened


def test_a_parsed_index_serves_the_sections_until_opened(tmp_path):
    prefix = _write(str(tmp_path / "p"))
    data = open(prefix + ".idx", "rb").read()
    lazy = LazyIndexedDataset(_facts(prefix), index=IndexFile(prefix + ".idx", False, data=data))
    assert lazy.sequence_lengths.tolist() == [5, 9, 2, 7] and not lazy.opened
    assert lazy.document_indices.tolist() == [0, 1, 2, 3, 4] and not lazy.opened


def test_an_opened_dataset_is_released_and_reopened(tmp_path):
    prefix = _write(str(tmp_path / "p"))
    opened = IndexedDataset(prefix)
    lazy = LazyIndexedDataset(_facts(prefix), opened=opened)
    assert lazy.dataset() is opened
    lazy.release()
    assert opened.closed and not lazy.opened and lazy[0].shape == (5,)


def test_changed_files_are_a_format_error_and_copies_stay_lazy(tmp_path):
    prefix = _write(str(tmp_path / "p"))
    lazy = LazyIndexedDataset(_facts(prefix))
    clone = pickle.loads(pickle.dumps(lazy))
    assert not clone.opened and len(clone) == 4
    _write(prefix, lengths=(5, 9, 2, 7), seed=1)  # regenerated under the same path
    with pytest.raises(FormatError, match="changed after the datasets were built"):
        lazy[0]
    with pytest.raises(FormatError, match="changed after"):
        _ = clone.sequence_lengths


def test_a_touched_bin_is_a_format_error_too(tmp_path):
    prefix = _write(str(tmp_path / "p"))
    lazy = LazyIndexedDataset(_facts(prefix))
    stat = os.stat(prefix + ".bin")
    os.utime(prefix + ".bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(FormatError, match=r"p\.idx/\.bin changed after"):
        lazy.get(0)
