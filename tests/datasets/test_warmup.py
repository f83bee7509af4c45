"""The kernel loader's background loading: dedicated tests of its life cycle, and
samples that are the same whichever path served them."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy
import pytest
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split
from tokenloom.kernels import KERNELS, KernelLoader

pytest.importorskip("numba")


@pytest.fixture()
def dataset(tmp_path):
    rng = numpy.random.default_rng(3)
    corpus = write_corpus(tmp_path / "c", rng.integers(1, 90, size=120), seed=5, vocab=50)
    config = small_config(corpus, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(
        low, corpus, split_indices(config, Split.train, len(low)), 300, Split.train, config
    )


def reference_samples(ds, rows, monkeypatch):
    """The same rows from a copy that never uses numba."""
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    copy = GPTDataset(
        ds.dataset, ds.dataset_path, ds.indices, ds.num_samples, ds.index_split, ds.config
    )
    samples = [copy[i] for i in rows]
    monkeypatch.delenv("TOKENLOOM_DISABLE_NUMBA")
    return samples


def assert_same(got, expected):
    assert list(got) == list(expected)
    for name in expected:
        assert got[name].dtype == expected[name].dtype, name
        numpy.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_samples_are_the_same_before_and_after_the_kernels_load(dataset, monkeypatch):
    rows = [0, 5, 17, 299, None]
    expected = reference_samples(dataset, rows, monkeypatch)
    first = [dataset[i] for i in rows]  # served while (or before) the kernels load
    assert KERNELS.join()
    later = [dataset[i] for i in rows]  # by the kernel once loaded
    for a, b, c in zip(first, later, expected):
        assert_same(a, c)
        assert_same(b, c)


def _fetch_in_child(ds, queue):
    queue.put(int(ds[7]["tokens"].sum()))


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_a_fork_right_after_the_first_sample_does_not_hang(dataset):
    dataset[0]  # may start the background load; the fork below must wait for it
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fetch_in_child, args=(dataset, queue))
    child.start()
    child.join(90)
    if child.is_alive():
        child.kill()
        pytest.fail("a forked worker hung fetching a sample")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == int(dataset[7]["tokens"].sum())


# -- the loader object itself ----------------------------------------------------------
@pytest.mark.timeout(60)
def test_loader_life_cycle_start_join_stop():
    loader = KernelLoader()
    gate, ran = threading.Event(), []
    loader.submit(lambda: (gate.wait(20), ran.append("first")))
    loader.submit(lambda: ran.append("second"))
    assert loader.pending() and ran == []  # started: one thread, tasks queued behind it
    assert not loader.join(timeout=0.05)
    gate.set()
    assert loader.join(timeout=20) and ran == ["first", "second"] and not loader.pending()
    loader.stop()  # stopped: later tasks run at once in the caller's thread
    loader.submit(lambda: ran.append(threading.current_thread().name))
    assert ran[-1] == threading.current_thread().name and not loader.pending()
    loader.restart()
    loader.submit(lambda: ran.append("again"))
    assert loader.join(timeout=20) and ran[-1] == "again"


@pytest.mark.timeout(60)
def test_exit_abandons_the_running_task_and_drops_the_rest():
    """At interpreter exit the loader waits for nothing: the running task is left to
    its daemon thread, queued and later tasks never run (until a restart)."""
    from tokenloom.kernels.shutdown import ExitGuard

    loader = KernelLoader(guard=ExitGuard())
    started, gate, ran = threading.Event(), threading.Event(), []
    loader.submit(lambda: (started.set(), gate.wait(20), ran.append("running")))
    loader.submit(lambda: ran.append("queued"))
    assert started.wait(20)
    loader.exit()  # returns at once: the first task is still held at the gate
    assert loader.pending() and ran == []
    loader.submit(lambda: ran.append("after exit"))
    gate.set()
    assert loader.join(timeout=20) and ran == ["running"]
    loader.restart()
    loader.submit(lambda: ran.append("restarted"))
    assert loader.join(timeout=20) and ran == ["running", "restarted"]


@pytest.mark.timeout(60)
def test_a_failing_task_does_not_stop_the_next_one():
    loader = KernelLoader()
    ran = []
    loader.submit(lambda: 1 / 0)
    loader.submit(lambda: ran.append(1))
    assert loader.join(timeout=20) and ran == [1]


@pytest.mark.timeout(120)
@pytest.mark.processes
def test_fork_joins_the_process_loader():
    """The process loader is joined before os.fork: a task still running in the
    parent has finished when the child starts."""
    finished = []
    KERNELS.submit(lambda: (time.sleep(0.5), finished.append(True)))
    context = multiprocessing.get_context("fork")
    child = context.Process(target=lambda: None)
    child.start()  # register_at_fork(before=KERNELS.join) waits for the task
    assert finished == [True]
    child.join(60)
    assert child.exitcode == 0


def test_a_long_reader_waits_for_a_slow_load_instead_of_staying_on_the_general_path(
    dataset, monkeypatch
):
    """The first GENERAL_SAMPLES_BEFORE_WAIT samples come at once from the general path
    while the (here artificially slowed) load runs; the next one waits for the kernel."""
    from tokenloom.datasets import _fast_sample
    from tokenloom.index import dispatch

    release = threading.Event()
    real_load = _fast_sample.load_sample_kernels

    def slow_load(*args):
        release.wait(30)  # the real load, held back until the test lets it go
        time.sleep(0.2)
        real_load(*args)

    monkeypatch.setattr(_fast_sample, "load_sample_kernels", slow_load)
    monkeypatch.setattr(dispatch, "GENERAL_SAMPLES_BEFORE_WAIT", 40)
    rows = [k % len(dataset) for k in range(41)]
    expected = reference_samples(dataset, rows, monkeypatch)
    source, _ = dataset.sampler()
    served = [dataset[k] for k in rows[:40]]  # never blocks: the load has not even begun
    assert source.sample_kernel is None
    release.set()
    last = dataset[rows[40]]  # waits for the load (0.2 s) and is served by the kernel
    assert source.sample_kernel is not None
    for got, want in zip(served + [last], expected):
        assert_same(got, want)
