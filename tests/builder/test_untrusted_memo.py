"""Crafted start-up memos (issue 18, classes 5 and 6): a memo nested 100,000 levels deep
behind a valid checksum, a FIFO, a file over the size limit or a symlink to /dev/zero is
ignored with a warning and rewritten, like a corrupt one: never a RecursionError, a
hang or an unbounded read."""

from __future__ import annotations

import glob
import hashlib
import logging
import os

import pytest
from tests.support.startup_blend import build
from tests.support.untrusted_files import deep_inside, plant, run_bounded

from tokenloom.builder import memo as startup_memo

pytestmark = pytest.mark.usefixtures("no_racy_window")


def _samples(blend):
    return [blend[k]["tokens"].tolist() for k in (0, 1, -1)] + [blend.dataset_index.tolist()]


def _memo(cache) -> str:
    return glob.glob(str(cache / "*-startup-memo.json"))[0]


def _craft(path: str, kind: str, monkeypatch) -> None:
    os.unlink(path)
    if kind == "deep":  # valid JSON, a valid checksum, 100,000 levels
        body = deep_inside({"files": {}, "lengths": {}}, "files")
        head = f"{startup_memo.MEMO_FORMAT} {hashlib.md5(body).hexdigest()}\n"
        with open(path, "wb") as handle:
            handle.write(head.encode() + body)
    elif kind == "fifo":
        os.mkfifo(path)
    else:  # a sparse file longer than the limit (lowered to keep the test light)
        monkeypatch.setattr(startup_memo, "MAX_MEMO_BYTES", 1 << 20, raising=False)
        plant(path, "huge")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["deep", "fifo", "huge"])
def test_crafted_memo_is_ignored_and_rewritten(corpora, tmp_path, caplog, monkeypatch, kind):
    cache = tmp_path / "cache"
    cold = build(corpora, cache)
    path = _memo(cache)
    _craft(path, kind, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="tokenloom.builder.memo"):
        warm = build(corpora, cache)
    assert _samples(warm) == _samples(cold)
    assert path in caplog.text and ("corrupt" in caplog.text or "unusable" in caplog.text)
    assert os.path.isfile(path) and startup_memo.StartupMemo.load(path).recorded_rows()


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_memo_symlinked_to_dev_zero_is_not_read(tmp_path):
    path = plant(tmp_path / "x-startup-memo.json", "zero")
    code = (
        "import sys; from tokenloom.builder.memo import StartupMemo; "
        "memo = StartupMemo.load(sys.argv[1]); print(len(memo.recorded_rows()))"
    )
    done = run_bounded(["-c", code, str(path)], tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["0"], done.stderr[-2000:]
    assert "not a regular file" in done.stderr
