"""A .bin/.idx pair (and its sidecar) changes all at once: killed at every filesystem
step, or interleaved with a second writer at every step, readers see the old set or
the new set, never a mix, and never an unreadable pair."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading

import numpy
import pytest
from tests.robustness._crash_points import count_steps, fork_at_step, wait, wait_stopped

from tokenloom.errors import FormatError, PublishTimeoutError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, publish

OLD = ([[1, 2, 3], [4]], b'{"gen": "old"}')
NEW = ([[9, 9], [8, 8, 8, 8, 8], [7]], b'{"gen": "new"}')
OTHER = ([[5] * 7], b'{"gen": "other"}')


def write(prefix, generation, lock_timeout=None):
    documents, sidecar = generation
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(document)
        builder.end_document()
    builder.finalize(f"{prefix}.idx", extra_files={".json": sidecar}, lock_timeout=lock_timeout)


def state(prefix):
    """(documents, sidecar) as a reader sees them now; None when nothing was published."""
    if not any(
        os.path.exists(path)
        for path in (f"{prefix}.idx", f"{prefix}.bin", publish.journal_path(prefix))
    ):
        return None
    with IndexedDataset(prefix) as dataset:
        documents = [dataset[i].tolist() for i in range(len(dataset))]
    with open(f"{prefix}.json", "rb") as handle:
        return documents, handle.read()


@pytest.fixture(autouse=True)
def _dump_stacks_on_hang():
    faulthandler.dump_traceback_later(100, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _fresh(folder, with_old: bool) -> str:
    """Empty ``folder`` but for the publish lock (so each step skips the first-lock grace)."""
    folder.mkdir(exist_ok=True)
    for name in os.listdir(folder):
        if name != publish.LOCK_NAME:
            os.unlink(folder / name)
    prefix = str(folder / "data")
    if with_old:
        write(prefix, OLD)
    return prefix


def _leftover_temporaries(folder):
    return [name for name in os.listdir(folder) if name.endswith(".tmp")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("with_old", [True, False], ids=["over-old-pair", "new-prefix"])
@pytest.mark.processes
def test_kill_at_every_step_of_finalize_leaves_old_or_new(tmp_path, with_old):
    prefix = _fresh(tmp_path / "d", with_old)
    total = count_steps(lambda prefix=prefix: write(prefix, NEW), str(tmp_path / "count"))
    assert total >= 8  # the lock, the temporaries, the journal, the renames, the fsyncs
    seen = set()
    for step in range(1, total + 1):
        prefix = _fresh(tmp_path / "d", with_old)
        assert (
            wait(fork_at_step(lambda prefix=prefix: write(prefix, NEW), step, "kill"))
            == -signal.SIGKILL
        )
        now = state(prefix)  # opening repairs an interrupted publish
        assert now in ((OLD if with_old else None), NEW), f"killed at step {step}: {now}"
        assert not os.path.exists(publish.journal_path(prefix))
        seen.add("new" if now == NEW else "old")
        write(prefix, OTHER)  # the next writer works, whatever the kill left
        assert state(prefix) == OTHER
        if now == NEW:  # rolled forward: every temporary was renamed into place
            assert _leftover_temporaries(tmp_path / "d") == []
    assert seen == {"old", "new"}  # some kills came before the commit point, some after


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_second_writer_or_reader_at_every_step_of_a_publish(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_LOCK_TIMEOUT_S", "0.3")
    prefix = _fresh(tmp_path / "d", True)
    total = count_steps(lambda prefix=prefix: write(prefix, NEW), str(tmp_path / "count"))
    waited = new_seen = 0
    for step in range(1, total + 1):
        prefix = _fresh(tmp_path / "d", True)
        first = fork_at_step(lambda prefix=prefix: write(prefix, NEW), step, "stop")
        try:
            assert wait_stopped(first), f"writer did not reach step {step}"
            try:  # a reader in the middle of the publish: old set, or a clear wait error;
                # the new set only once the frozen writer has finished its renames
                seen = state(prefix)
                finished = not os.path.exists(publish.journal_path(prefix))
                assert seen == OLD or (seen == NEW and finished), f"reader mixed at step {step}"
                new_seen += seen == NEW
            except PublishTimeoutError:
                waited += 1
            second = fork_at_step(
                lambda prefix=prefix: write(prefix, OTHER, lock_timeout=0.3), 0, "kill"
            )
            second_code = wait(second)
        finally:
            os.kill(first, signal.SIGCONT)
        assert wait(first) == 0
        assert second_code in (0, 3)  # done, or PublishTimeoutError while the first held the lock
        final = state(prefix)
        assert final in (NEW, OTHER), f"step {step}: {final}"
        if second_code == 3:  # the second writer gave up: the first one's set is there
            assert final == NEW
    assert waited >= 1  # some steps lie inside the locked commit


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_a_reader_waiting_on_a_frozen_writer_at_every_step_gets_one_whole_set(tmp_path):
    """A reader that waits (rather than times out) on a writer frozen at any step gets
    the old set or the new one once the writer goes on: when it waited on an .idx or a
    lock file that the writer then replaced or deleted, it locks what is there now."""
    prefix = _fresh(tmp_path / "d", True)
    total = count_steps(lambda prefix=prefix: write(prefix, NEW), str(tmp_path / "count"))
    outcomes = set()
    for step in range(1, total + 1):
        prefix = _fresh(tmp_path / "d", True)
        first = fork_at_step(lambda prefix=prefix: write(prefix, NEW), step, "stop")
        seen: list = []
        try:
            assert wait_stopped(first), f"writer did not reach step {step}"
            reader = threading.Thread(target=lambda s=seen, p=prefix: s.append(state(p)))
            reader.start()
            reader.join(0.1)  # blocked now when the frozen writer holds what it needs
            blocked = reader.is_alive()
        finally:
            os.kill(first, signal.SIGCONT)
        reader.join(30)
        assert wait(first) == 0
        assert seen and seen[0] in (OLD, NEW), f"reader mixed at step {step}: {seen}"
        outcomes.add((blocked, "new" if seen[0] == NEW else "old"))
        assert sorted(os.listdir(tmp_path / "d")) == ["data.bin", "data.idx", "data.json"]
    assert (True, "new") in outcomes  # some readers waited through the commit, then read it
    assert (False, "old") in outcomes


def test_stale_journal_from_a_read_only_process_is_reported(tmp_path):
    prefix = _fresh(tmp_path / "d", True)
    open(publish.journal_path(prefix), "w").write("not json")
    with pytest.raises(FormatError, match="publish journal is unreadable"):
        IndexedDataset(prefix)


def test_extra_files_cannot_replace_the_pair(tmp_path):
    prefix = str(tmp_path / "x")
    builder = IndexedDatasetBuilder(f"{prefix}.bin")
    builder.add_item([1])
    builder.end_document()
    with pytest.raises(FormatError, match="extra file suffix"):
        builder.finalize(f"{prefix}.idx", extra_files={".bin": b"x"})
    assert os.listdir(tmp_path) == []


def test_output_that_is_a_directory_fails_up_front(tmp_path):
    (tmp_path / "out.idx").mkdir()
    with pytest.raises(FormatError, match="out.idx: the output index file is an existing dir"):
        IndexedDatasetBuilder(str(tmp_path / "out.bin"))
    with pytest.raises(FormatError, match="is a file, not a directory"):
        (tmp_path / "file").write_text("x")
        IndexedDatasetBuilder(str(tmp_path / "file" / "sub" / "out.bin"))


def _preprocessed(prefix):
    """Documents of a preprocess output as a reader sees them (None: never published)."""
    if not any(os.path.exists(p) for p in (f"{prefix}.idx", publish.journal_path(prefix))):
        return None
    with IndexedDataset(prefix) as dataset:
        return [dataset[i].tolist() for i in range(len(dataset))]


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_kill_at_every_step_of_preprocessing_output(tmp_path):
    from tokenloom.preprocess import preprocess

    (tmp_path / "old.jsonl").write_text('{"text": "old"}\n')
    (tmp_path / "new.jsonl").write_text('{"text": "brand"}\n{"text": "new"}\n')
    out = tmp_path / "out"

    def run(name):
        preprocess(str(tmp_path / name), str(out / "web"), "bytes", show_progress=False)

    def fresh():
        _fresh(out, False)
        run("old.jsonl")

    prefix = str(out / "web_text_document")
    fresh()
    old, total = _preprocessed(prefix), count_steps(lambda: run("new.jsonl"), str(tmp_path / "n"))
    run("new.jsonl")
    new = _preprocessed(prefix)
    assert old != new and total >= 8
    seen = set()
    for step in range(1, total + 1):
        fresh()
        assert wait(fork_at_step(lambda: run("new.jsonl"), step, "kill")) == -signal.SIGKILL
        now = _preprocessed(prefix)
        assert now in (old, new), f"killed at step {step} of {total}: {now}"
        seen.add("new" if now == new else "old")
    assert seen == {"old", "new"}


def test_reading_leaves_no_trace(tmp_path):
    prefix = _fresh(tmp_path / "d", True)
    before = sorted(os.listdir(tmp_path / "d"))
    assert before == ["data.bin", "data.idx", "data.json"]
    assert state(prefix) == OLD and sorted(os.listdir(tmp_path / "d")) == before
