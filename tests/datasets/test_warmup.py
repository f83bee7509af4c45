"""dataset[i] loads its numba kernels in the background: same samples before and after,
and a fork during the load cannot leave a DataLoader worker hanging."""

from __future__ import annotations

import multiprocessing

import numpy
import pytest

from tokenloom.datasets import GPTDataset, Split
from tokenloom.datasets import _warmup
from tests.datasets._helpers import small_config, split_indices, write_corpus

pytest.importorskip("numba")


@pytest.fixture()
def dataset(tmp_path, monkeypatch):
    monkeypatch.setenv(_warmup.SYNC_ENV, "0")
    rng = numpy.random.default_rng(3)
    corpus = write_corpus(tmp_path / "c", rng.integers(1, 90, size=120), seed=5, vocab=50)
    config = small_config(corpus, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(low, corpus, split_indices(config, Split.train, len(low)), 300,
                      Split.train, config)


def reference_samples(ds, rows, monkeypatch):
    """The same rows from a copy that never uses numba."""
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    copy = GPTDataset(ds.dataset, ds.dataset_path, ds.indices, ds.num_samples, ds.index_split,
                      ds.config)
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
    _warmup.wait()
    source, _ = dataset._sampler()
    assert source.sample_kernel is not None, "the background load never published the kernel"
    later = [dataset[i] for i in rows]  # by the kernel
    for a, b, c in zip(first, later, expected):
        assert_same(a, c)
        assert_same(b, c)


def _fetch_in_child(ds, queue):
    queue.put(int(ds[7]["tokens"].sum()))


@pytest.mark.timeout(120)
def test_a_fork_right_after_the_first_sample_does_not_hang(dataset):
    dataset[0]  # starts the background load; the fork below must wait for it
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


def test_a_long_reader_waits_for_a_slow_load_instead_of_staying_on_the_general_path(
        dataset, monkeypatch):
    """The first GENERAL_SAMPLES_BEFORE_WAIT samples come at once from the general path
    while the (here artificially slowed) load runs; the next one waits for the kernel."""
    import threading
    import time

    from tokenloom.datasets import _sample

    release = threading.Event()
    real_load = _sample.TokenSource.load_kernels

    def slow_load(self, *args):
        release.wait(30)  # the real load, held back until the test lets it go
        time.sleep(0.2)
        real_load(self, *args)

    monkeypatch.setattr(_sample.TokenSource, "load_kernels", slow_load)
    monkeypatch.setattr(_sample, "GENERAL_SAMPLES_BEFORE_WAIT", 40)
    rows = [k % len(dataset) for k in range(41)]
    expected = reference_samples(dataset, rows, monkeypatch)
    source, _ = dataset._sampler()
    served = [dataset[k] for k in rows[:40]]  # never blocks: the load has not even begun
    assert source.sample_kernel is None
    release.set()
    last = dataset[rows[40]]  # waits for the load (0.2 s) and is served by the kernel
    assert source.sample_kernel is not None
    for got, want in zip(served + [last], expected):
        assert_same(got, want)
