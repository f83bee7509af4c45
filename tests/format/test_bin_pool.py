"""The bounded pool of .bin mappings and descriptors: equal bytes under churn, views that
outlive eviction, reopen checks, a refused mmap read by pread, fork."""

from __future__ import annotations

import gc
import logging
import os
import threading

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.format_files import write_dataset

from tokenloom.errors import FormatError
from tokenloom.format import FileBinReader, IndexedDataset, MMapBinReader
from tokenloom.format._mapping import MAPS, QUOTA_VARIABLE
from tokenloom.format.bin_pool import BIN_POOL, DEFAULT_MAX_OPEN_BIN_FILES
from tokenloom.process_caches import ONE_TIME_NOTICES

FILES = 6


@pytest.fixture
def small_pool():
    """The process pool bounded at 2 for one test (restored after)."""
    BIN_POOL.reset()
    BIN_POOL.resize(2)
    yield BIN_POOL
    BIN_POOL.resize(DEFAULT_MAX_OPEN_BIN_FILES)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """``FILES`` pairs of 30 one-sequence documents, and their token lists."""
    root = tmp_path_factory.mktemp("pool")
    rng = numpy.random.default_rng(5)
    prefixes, tokens = [], []
    for i in range(FILES):
        docs = [[rng.integers(0, 60000, rng.integers(1, 40)).tolist()] for _ in range(30)]
        write_dataset(str(root / f"p{i}"), docs)
        prefixes.append(str(root / f"p{i}"))
        tokens.append([d[0] for d in docs])
    return prefixes, tokens


def _bin(tmp_path, name, values):
    path = tmp_path / name
    numpy.asarray(values, dtype=numpy.int32).tofile(path)
    return str(path)


accesses = st.lists(
    st.tuples(st.integers(0, FILES - 1), st.integers(0, 29), st.sampled_from(["get", "tokens"])),
    min_size=1,
    max_size=60,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=accesses, mmap=st.booleans())
def test_any_access_sequence_reads_the_same_bytes_as_an_unbounded_reader(
    corpora, small_pool, sequence, mmap
):
    prefixes, tokens = corpora
    datasets = [IndexedDataset(p, mmap=mmap) for p in prefixes]
    try:
        for file, doc, how in sequence:
            dataset = datasets[file]
            if how == "get":
                got = dataset.get(doc)
            else:
                got = dataset[doc]
            assert got.tolist() == tokens[file][doc]
            assert len(small_pool) <= small_pool.bound
        assert small_pool.evicted > 0 or len({f for f, _, _ in sequence}) <= 2
    finally:
        for dataset in datasets:
            dataset.close()


def test_a_view_outlives_the_eviction_of_its_mapping(tmp_path, small_pool):
    values = numpy.arange(1000, dtype=numpy.int32)
    gc.collect()  # earlier tests' garbage mappings go now, not in the middle
    reader = MMapBinReader(_bin(tmp_path, "a.bin", values))
    view = reader.read(numpy.int32, 10, 400)
    before = MAPS.live
    others = [MMapBinReader(_bin(tmp_path, f"o{i}.bin", [i])) for i in range(2)]
    assert not reader.mapped  # evicted: the least recently used of three in a pool of 2
    assert view.tolist() == list(range(100, 110))  # still mapped: the view holds it
    assert MAPS.live == before + 2
    del view
    gc.collect()
    assert MAPS.live == before + 1  # the evicted mapping went with its last view
    assert reader.read(numpy.int32, 2, 0).tolist() == [0, 1]  # reopened on use
    assert reader.mapped and not others[0].mapped


def test_samples_read_while_another_thread_evicts_stay_valid(corpora, small_pool):
    prefixes, tokens = corpora
    datasets = [IndexedDataset(p) for p in prefixes]
    stop, wrong = threading.Event(), []

    def churn():
        while not stop.is_set():
            BIN_POOL.reset()

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for round_ in range(300):
            file, doc = round_ % FILES, round_ % 30
            view = datasets[file][doc]
            if view.tolist() != tokens[file][doc]:
                wrong.append((file, doc))
    finally:
        stop.set()
        thread.join()
    assert not wrong


@pytest.mark.parametrize("kind", [MMapBinReader, FileBinReader])
def test_a_file_replaced_while_evicted_is_an_error_naming_it_on_reopen(tmp_path, small_pool, kind):
    path = _bin(tmp_path, "r.bin", numpy.arange(100))
    reader = kind(path)
    assert reader.read(numpy.int32, 1, 4).tolist() == [1]
    reader.evict()
    replacement = _bin(tmp_path, "new.bin", numpy.arange(100) + 7)  # same size
    os.utime(replacement, ns=(1, 1))
    os.replace(replacement, path)
    with pytest.raises(FormatError, match="r.bin: the data file changed since it was first opened"):
        reader.read(numpy.int32, 1, 4)


def test_an_evicted_reader_of_an_unchanged_file_reopens_silently(tmp_path, small_pool):
    reader = FileBinReader(_bin(tmp_path, "s.bin", numpy.arange(50)))
    for _ in range(3):
        assert reader.read(numpy.int32, 2, 8).tolist() == [2, 3]
        reader.evict()


def test_a_refused_mmap_reads_by_pread_with_one_warning(corpora, monkeypatch, caplog):
    prefixes, tokens = corpora
    ONE_TIME_NOTICES.pop("mmap_refused")
    monkeypatch.setenv(QUOTA_VARIABLE, str(MAPS.live))  # no further mapping allowed
    with caplog.at_level(logging.DEBUG, logger="tokenloom.format._mapping"):
        datasets = [IndexedDataset(p) for p in prefixes[:3]]
    assert all(d.bin_reader.reads_by_pread for d in datasets)
    assert all(d.tokens is None for d in datasets)
    for file, dataset in enumerate(datasets):
        assert [dataset[i].tolist() for i in range(30)] == tokens[file]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and prefixes[0] in warnings[0].getMessage()
    assert "memory-mapping refused" in warnings[0].getMessage()


def test_a_mapping_error_that_is_no_refusal_still_raises(tmp_path, monkeypatch):
    import tokenloom.format.bin_readers as bin_readers

    def broken(handle, size):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(bin_readers, "map_readonly", broken)
    with pytest.raises(OSError, match="Input/output"):
        MMapBinReader(_bin(tmp_path, "e.bin", [1, 2]))


def test_the_pool_is_registered_and_cleared(corpora):
    from tokenloom.process_caches import clear_process_caches, process_state

    dataset = IndexedDataset(corpora[0][0])
    assert dataset.bin_reader in BIN_POOL.members()
    clear_process_caches()
    assert not dataset.bin_reader.mapped and dataset.bin_reader not in BIN_POOL.members()
    assert dataset[3].tolist() == corpora[1][0][3]
    assert any(getattr(s, "owner", None) is BIN_POOL for s in process_state())


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_forked_child_reads_through_its_own_descriptor_and_leaves_the_parents(tmp_path):
    path = _bin(tmp_path, "f.bin", numpy.arange(100))
    reader = FileBinReader(path)
    assert reader.read(numpy.int32, 1, 0).tolist() == [0]

    def descriptors():
        return sum(
            os.path.realpath(f"/proc/self/fd/{fd}") == path for fd in os.listdir("/proc/self/fd")
        )

    assert descriptors() == 1
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the inherited copy is closed at fork, the read opens a new one
        os.close(read_end)
        ok = reader not in BIN_POOL.members() and descriptors() == 0
        ok = ok and reader.read(numpy.int32, 2, 8).tolist() == [2, 3] and descriptors() == 1
        os.write(write_end, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1"
    os.close(read_end)
    assert descriptors() == 1 and reader in BIN_POOL.members()  # the parent's is intact
    assert reader.read(numpy.int32, 1, 396).tolist() == [99]
