"""A pickled ``IndexedDataset`` reopened in a spawned process (a DataLoader worker) checks
that the files are still those its parent opened, and says which changed."""

from __future__ import annotations

import multiprocessing
import pickle
import queue

import numpy
import pytest

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder

pytestmark = pytest.mark.processes


def _write(prefix: str, seed: int) -> None:
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    rng = numpy.random.default_rng(seed)
    for length in (30, 12, 44, 7):
        builder.add_item(rng.integers(1, 60000, size=length))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def _reopen(data: bytes, answers: multiprocessing.Queue[object]) -> None:
    try:
        dataset = pickle.loads(data)
        answers.put(("tokens", [dataset[i].tolist() for i in range(len(dataset))]))
    except FormatError as error:
        answers.put(("FormatError", str(error)))
    except Exception as error:  # noqa: BLE001 - reported to the parent as a failure
        answers.put((type(error).__name__, str(error)))


def _in_spawned_process(dataset: IndexedDataset) -> tuple:
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    process = context.Process(target=_reopen, args=(pickle.dumps(dataset), answers))
    process.start()
    try:
        return answers.get(timeout=60)
    except queue.Empty:
        pytest.fail("the spawned process did not answer")
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()


@pytest.mark.timeout(120)
def test_spawned_copy_reads_what_the_parent_reads(tmp_path):
    prefix = str(tmp_path / "pair")
    _write(prefix, seed=1)
    dataset = IndexedDataset(prefix)
    kind, value = _in_spawned_process(dataset)
    assert kind == "tokens" and value == [dataset[i].tolist() for i in range(len(dataset))]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["regenerated", "bin_touched"])
def test_spawned_copy_of_a_changed_pair_is_a_format_error_naming_the_file(tmp_path, what):
    prefix = str(tmp_path / "pair")
    _write(prefix, seed=1)
    dataset = IndexedDataset(prefix)
    parent = [dataset[i].tolist() for i in range(len(dataset))]
    if what == "regenerated":  # same path, same sizes, other tokens and lengths order
        _write(prefix, seed=2)
    else:
        import os

        stat = os.stat(prefix + ".bin")
        os.utime(prefix + ".bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    kind, message = _in_spawned_process(dataset)
    assert kind == "FormatError", (kind, message)
    assert "changed after this dataset was pickled" in message
    assert (prefix + ".bin") in message
    if what == "regenerated":
        assert (prefix + ".idx") in message
    assert [dataset[i].tolist() for i in range(len(dataset))] == parent  # the parent's map
