"""The start-up memo: a warm build opens nothing it does not need, and never reuses a
fact about a file that changed (regenerated, touched, edited) or a corrupt memo."""

from __future__ import annotations

import glob
import logging
import os
import pickle

import numpy
import pytest
from tests.support.random_corpora import write_corpus
from tests.support.startup_blend import build

from tokenloom.builder import memo as startup_memo
from tokenloom.errors import FormatError
from tokenloom.format import LazyIndexedDataset
from tokenloom.format.identity import stat_key

pytestmark = pytest.mark.usefixtures("no_racy_window")


def samples(blend, ks=(0, 1, 57, -1)):
    return [blend[k]["tokens"].tolist() for k in ks] + [blend.dataset_index.tolist()]


def deferred(blend):
    return [isinstance(d.dataset, LazyIndexedDataset) for d in blend.datasets]


def memo_hits(blend):
    """Which datasets were set up from the memo alone (files unopened, indices unloaded)."""
    return [d.cached_indices.expected_length is not None for d in blend.datasets]


def test_warm_build_defers_every_prefix_and_gives_the_same_samples(corpora, tmp_path):
    cold = build(corpora, tmp_path / "cache")
    assert len(glob.glob(str(tmp_path / "cache" / "*-startup-memo.json"))) == 1
    assert deferred(cold) == [True] * 4  # the cold build closed what it opened
    warm = build(corpora, tmp_path / "cache")
    assert deferred(warm) == [True] * 4
    assert not any(d.dataset.opened or d.indices_loaded for d in warm.datasets)
    assert [len(d) for d in warm.datasets] == [len(d) for d in cold.datasets]
    first = warm.datasets[int(warm.dataset_index[0])]
    assert samples(warm) == samples(cold)
    assert first.dataset.opened and first.indices_loaded
    clone = pickle.loads(pickle.dumps(warm))  # workers stay deferred, then open on their own
    assert not clone.datasets[1].dataset.opened and samples(clone) == samples(cold)


def test_regenerated_prefix_misses(corpora, tmp_path):
    cold = build(corpora, tmp_path / "cache")
    for suffix in (".bin", ".idx"):
        os.unlink(corpora[1] + suffix)
    write_corpus(corpora[1], 40, seed=99)  # new content, same path and document count
    warm = build(corpora, tmp_path / "cache")
    assert memo_hits(warm) == [True, False, True, True]
    assert warm.datasets[1].cache_key.stem != cold.datasets[1].cache_key.stem
    assert samples(warm) == samples(build(corpora, tmp_path / "fresh"))


def test_touched_prefix_misses_but_keeps_its_samples(corpora, tmp_path):
    cold = samples(build(corpora, tmp_path / "cache"))
    stat = os.stat(corpora[2] + ".idx")
    os.utime(corpora[2] + ".idx", ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ctime moves
    warm = build(corpora, tmp_path / "cache")
    assert samples(warm) == cold
    # the touched .idx was read again and its new stat recorded (its cache key, hence
    # its cached length, is unchanged: same size, mtime and content)
    (memo_file,) = glob.glob(str(tmp_path / "cache" / "*-startup-memo.json"))
    recorded = startup_memo.StartupMemo.load(memo_file).recorded_rows()
    idx = os.path.abspath(corpora[2] + ".idx")
    assert recorded[idx][:4] == list(stat_key(os.stat(idx)))
    assert recorded[idx][2] != stat.st_ctime_ns


def test_add_extra_token_change_uses_other_indices(corpora, tmp_path):
    build(corpora, tmp_path / "cache")
    other = build(corpora, tmp_path / "cache", add_extra_token_to_sequence=False)
    assert deferred(other) == [True] * 4  # file facts still hold...
    assert all(
        d.cached_indices.expected_length is None for d in other.datasets
    )  # ...lengths do not
    fresh = build(corpora, tmp_path / "fresh", add_extra_token_to_sequence=False)
    assert samples(other) == samples(fresh)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_memo_is_ignored_and_rewritten(corpora, tmp_path, caplog, damage):
    cold = build(corpora, tmp_path / "cache")
    path = glob.glob(str(tmp_path / "cache" / "*-startup-memo.json"))[0]
    data = bytearray(open(path, "rb").read())
    if damage == "truncate":
        data = data[:-7]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = bytearray(b"\x00\xffnot a memo")
    open(path, "wb").write(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tokenloom.builder.memo"):
        warm = build(corpora, tmp_path / "cache")
    assert "corrupt" in caplog.text and memo_hits(warm) == [False] * 4
    assert samples(warm) == samples(cold)
    assert memo_hits(build(corpora, tmp_path / "cache")) == [True] * 4  # rewritten


def test_recent_files_are_not_recorded(corpora, tmp_path, monkeypatch):
    monkeypatch.setattr(startup_memo, "RACY_WINDOW_NS", 3600 * 10**9)
    build(corpora, tmp_path / "cache")
    assert deferred(build(corpora, tmp_path / "cache")) == [False] * 4  # nor swapped


def test_file_changed_after_start_up_is_an_error_not_a_stale_read(corpora, tmp_path):
    build(corpora, tmp_path / "cache")
    warm = build(corpora, tmp_path / "cache")
    for suffix in (".bin", ".idx"):
        os.unlink(corpora[3] + suffix)
    write_corpus(corpora[3], 25, seed=7)
    with pytest.raises(FormatError, match="changed after the datasets were built"):
        warm.datasets[3][0]


def test_deleted_gpt_cache_is_rebuilt_on_first_use(corpora, tmp_path):
    cold = build(corpora, tmp_path / "cache")
    want = [cold.datasets[0][k]["tokens"].tolist() for k in range(3)]
    warm = build(corpora, tmp_path / "cache")
    for path in glob.glob(str(tmp_path / "cache" / f"{warm.datasets[0].cache_key.stem}-*")):
        os.unlink(path)
    assert [warm.datasets[0][k]["tokens"].tolist() for k in range(3)] == want
    assert numpy.array_equal(warm.datasets[0].shuffle_index, cold.datasets[0].shuffle_index)
