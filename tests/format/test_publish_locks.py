"""The directory's publish lock file is never followed through a symbolic link: a link
planted as ``DIR/.tokenloom-publish.lock`` in a shared folder would otherwise make every
writer there create (``O_CREAT``) a file wherever it points, with the writer's rights.
Writers refuse it with one error naming it; readers lock the directory instead."""

from __future__ import annotations

import errno
import os

import numpy
import pytest

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, publish
from tokenloom.format.publish_locks import Deadline, acquire


def _write(prefix: str, documents) -> None:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(document)
        builder.end_document()
    builder.finalize(f"{prefix}.idx", extra_files={".json": b"{}"})


@pytest.mark.parametrize("target", ["dangling", "existing"])
def test_a_writer_refuses_a_lock_file_that_is_a_symbolic_link(tmp_path, target):
    (tmp_path / "d").mkdir()
    (tmp_path / "outside").mkdir()
    pointed = tmp_path / "outside" / "file"
    if target == "existing":
        pointed.write_bytes(b"keep me")
    lock = tmp_path / "d" / publish.LOCK_NAME
    os.symlink(pointed, lock)
    with pytest.raises(FormatError, match="publish lock file is a symbolic link") as caught:
        _write(str(tmp_path / "d" / "data"), [[1, 2]])
    assert str(lock) in str(caught.value)
    assert os.listdir(tmp_path / "d") == [publish.LOCK_NAME]  # nothing published, no temporaries
    if target == "existing":
        assert pointed.read_bytes() == b"keep me"
    else:
        assert not pointed.exists()  # no file created where the link points
    os.unlink(lock)  # what the error says to do
    _write(str(tmp_path / "d" / "data"), [[1, 2]])
    with IndexedDataset(str(tmp_path / "d" / "data")) as dataset:
        assert dataset[0].tolist() == [1, 2]


def test_readers_lock_the_directory_past_a_planted_link(tmp_path):
    prefix = str(tmp_path / "data")
    os.symlink(tmp_path / "nowhere", tmp_path / publish.LOCK_NAME)
    with publish.reading(prefix):  # no .idx yet: the directory is locked instead
        pass
    assert not (tmp_path / "nowhere").exists()
    os.unlink(tmp_path / publish.LOCK_NAME)
    _write(prefix, [[3]])
    os.symlink(tmp_path / "nowhere", tmp_path / publish.LOCK_NAME)
    with IndexedDataset(prefix) as dataset:  # an .idx: locked as usual
        assert dataset[0].tolist() == [3]


def test_nofollow_is_eloop_and_a_plain_open_follows(tmp_path):
    (tmp_path / "real").write_bytes(b"")
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(OSError) as caught:
        acquire(str(tmp_path / "link"), False, Deadline(1), nofollow=True)
    assert caught.value.errno == errno.ELOOP
    fd = acquire(str(tmp_path / "link"), False, Deadline(1))  # an .idx may be a link
    assert fd is not None
    os.close(fd)
