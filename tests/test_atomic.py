"""tokenloom.atomic: temporary sibling, then rename; nothing partial is ever published."""

from __future__ import annotations

import os
import stat

import pytest

from tokenloom.atomic import atomic_open, atomic_write_bytes


def test_publishes_with_the_umask_mode_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "dir" / "file.bin"  # missing folders are created
    atomic_write_bytes(target, b"payload", durable=False)
    assert target.read_bytes() == b"payload"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert os.listdir(target.parent) == ["file.bin"]


@pytest.mark.parametrize("durable", [True, False])
def test_failure_keeps_the_old_file_and_removes_the_temporary(tmp_path, durable):
    target = tmp_path / "file.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w", durable=durable) as handle:
            handle.write("new, half written")
            raise RuntimeError("killed")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["file.txt"]
    with atomic_open(target, "w", durable=durable) as handle:
        handle.write("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["file.txt"]


def test_bad_mode_leaks_neither_descriptor_nor_file(tmp_path):
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(ValueError):
        with atomic_open(tmp_path / "x", "no-such-mode"):
            pass
    assert os.listdir(tmp_path) == []
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
