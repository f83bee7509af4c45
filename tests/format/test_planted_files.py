"""A FIFO (or device) planted where a pair's file belongs never blocks: the identity of a
pair (the caches' key, computed also for pairs opened by other code) refuses it, and the
check of an open is made on the descriptor it opened, so a FIFO swapped in after a
``stat`` cannot block the open either."""

from __future__ import annotations

import os

import numpy
import pytest

from tokenloom.errors import CacheError, FormatError
from tokenloom.format import IndexedDatasetBuilder, identity, spec


def _pair(prefix: str) -> str:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    builder.add_item([1, 2, 3])
    builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix


@pytest.mark.timeout(30)
def test_the_identity_of_a_pair_whose_idx_is_a_fifo_is_a_cache_error(tmp_path):
    prefix = _pair(str(tmp_path / "data"))
    os.unlink(f"{prefix}.idx")
    os.mkfifo(f"{prefix}.idx")
    with pytest.raises(CacheError, match=r"data\.idx: cannot identify .*not a regular file"):
        identity.file_identity(prefix)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("what", ["index", "data"])
def test_a_fifo_swapped_in_after_the_stat_does_not_block_the_open(tmp_path, monkeypatch, what):
    regular, fifo = tmp_path / "regular", str(tmp_path / "swapped")
    regular.write_bytes(b"x")
    os.mkfifo(fifo)
    real = os.stat

    def stat_before_the_swap(path, *args, **kwargs):  # what a stat saw a moment earlier
        return real(regular if os.fspath(path) == fifo else path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_before_the_swap)
    with pytest.raises(FormatError, match=f"swapped: the {what} file is not a regular file"):
        spec.open_regular_file(fifo, what)


def test_a_regular_file_opens_blocking_and_reads_whole(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc" * 1000)
    with spec.open_regular_file(str(path), "data", buffering=0) as handle:
        assert os.get_blocking(handle.fileno())
        assert handle.name == str(path)  # mappings (and SIGBUS reports) name the file
        assert handle.read() == b"abc" * 1000
