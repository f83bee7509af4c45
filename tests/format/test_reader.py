"""IndexedDataset: items, slices, get, views, pickling, lifetime, readers."""

from __future__ import annotations

import pickle

import numpy
import pytest
from tests.support.format_files import random_documents, write_dataset

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, get_bin_path, get_idx_path


def _flat(documents):
    return [sequence for document in documents for sequence in document]


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "file"])
def test_items_slices_and_get(small_prefix, mmap):
    prefix, documents = small_prefix
    sequences = _flat(documents)
    dataset = IndexedDataset(prefix, mmap=mmap)
    assert len(dataset) == len(sequences)
    assert [s.tolist() for s in dataset[3:11]] == sequences[3:11]
    assert [s.tolist() for s in dataset[:]] == sequences
    assert dataset[5:5] == [] and dataset[-1].tolist() == sequences[-1]
    longest = int(numpy.argmax(dataset.sequence_lengths))
    assert dataset.get(longest, offset=2, length=5).tolist() == sequences[longest][2:7]
    assert dataset.get(longest, offset=3).tolist() == sequences[longest][3:]
    assert dataset.get(numpy.int64(longest)).tolist() == sequences[longest]
    with pytest.raises(FormatError, match="contiguous"):
        dataset[0:10:2]
    with pytest.raises(TypeError):
        dataset[1.5]


def test_index_arrays_and_pointers(small_prefix):
    prefix, documents = small_prefix
    dataset = IndexedDataset(prefix)
    lengths = [len(s) for s in _flat(documents)]
    assert dataset.sequence_lengths.dtype == numpy.int32
    assert dataset.sequence_pointers.dtype == numpy.int64
    assert dataset.document_indices.dtype == numpy.int64
    assert dataset.sequence_lengths.tolist() == lengths
    assert dataset.sequence_pointers.tolist() == (2 * numpy.cumsum([0] + lengths[:-1])).tolist()
    assert (
        dataset.document_indices.tolist()
        == numpy.cumsum([0] + [len(d) for d in documents]).tolist()
    )
    assert not dataset.sequence_lengths.flags.writeable


def test_tokens_view_supports_vectorised_gathers(small_prefix):
    prefix, documents = small_prefix
    dataset = IndexedDataset(prefix)
    tokens = dataset.tokens
    assert tokens.ndim == 1 and tokens.dtype == numpy.uint16 and not tokens.flags.writeable
    assert tokens.tolist() == [t for s in _flat(documents) for t in s]
    starts = dataset.sequence_pointers // tokens.itemsize
    assert tokens[starts[dataset.sequence_lengths > 0]].tolist() == [
        s[0] for s in _flat(documents) if s
    ]
    assert IndexedDataset(prefix, mmap=False).tokens is None


def test_iteration_stops_with_index_error(small_prefix):
    prefix, documents = small_prefix
    dataset = IndexedDataset(prefix)
    assert len(list(dataset)) == len(_flat(documents))
    with pytest.raises(IndexError):
        dataset[len(dataset)]


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "file"])
def test_pickle_reopens_files(small_prefix, mmap):
    prefix, documents = small_prefix
    dataset = IndexedDataset(
        prefix, mmap=mmap, sequences_per_dataset=(len(_flat(documents)), len(documents) + 1)
    )
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone is not dataset and clone.mmap == mmap
    assert [s.tolist() for s in clone] == [s.tolist() for s in dataset]
    dataset.close()
    assert clone[0].tolist() == _flat(documents)[0]


@pytest.mark.processes
def test_dataloader_workers_read_through_pickled_dataset(small_prefix):
    torch = pytest.importorskip("torch")
    prefix, documents = small_prefix
    dataset = IndexedDataset(prefix)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=1,
        collate_fn=numpy.ndarray.tolist,
        multiprocessing_context="spawn",
    )
    assert list(loader) == _flat(documents)


def test_close_and_context_manager(small_prefix):
    prefix, _ = small_prefix
    with IndexedDataset(prefix) as dataset:
        first = dataset[0]
    assert dataset.closed
    with pytest.raises(FormatError, match="closed"):
        _ = dataset.sequence_lengths
    with pytest.raises(FormatError, match="closed"):
        dataset[0]
    dataset.close()  # idempotent
    assert first.shape[0] >= 0


def test_exists(small_prefix, tmp_path):
    prefix, _ = small_prefix
    assert IndexedDataset.exists(prefix)
    assert not IndexedDataset.exists(str(tmp_path / "nothing"))
    (tmp_path / "half.idx").write_bytes(open(get_idx_path(prefix), "rb").read())
    assert not IndexedDataset.exists(str(tmp_path / "half"))


def test_multimodal_round_trip(tmp_path):
    rng = numpy.random.default_rng(3)
    documents = [
        [
            (rng.integers(0, 9, rng.integers(1, 6)).tolist(), int(rng.integers(-3, 4)))
            for _ in range(rng.integers(1, 4))
        ]
        for _ in range(10)
    ]
    prefix = write_dataset(tmp_path / "mm", documents, numpy.int32, multimodal=True)
    flat = _flat(documents)
    dataset = IndexedDataset(prefix, multimodal=True)
    assert dataset.sequence_modes.tolist() == [m for _, m in flat]
    tokens, mode = dataset.get(2)
    assert (tokens.tolist(), int(mode)) == flat[2]
    sequences, modes = dataset[1:4]
    assert [s.tolist() for s in sequences] == [t for t, _ in flat[1:4]]
    assert modes.tolist() == [m for _, m in flat[1:4]]
    text_only = IndexedDataset(prefix)  # modes present but not asked for: ignored
    assert text_only[2].tolist() == flat[2][0] and text_only.sequence_modes is None


def test_sequences_per_dataset_and_fast_cache_load(small_prefix):
    prefix, documents = small_prefix
    counts = (len(_flat(documents)), len(documents) + 1)
    dataset = IndexedDataset(prefix, fast_cache_load=True, sequences_per_dataset=counts)
    assert len(dataset) == counts[0]
    with pytest.raises(FormatError, match="sequences_per_dataset"):
        IndexedDataset(prefix, sequences_per_dataset=(counts[0] + 1, counts[1]))
    with pytest.raises(FormatError, match="dtype_code"):
        IndexedDataset(prefix, dtype_code=4)


def test_empty_dataset(tmp_path):
    prefix = write_dataset(tmp_path / "empty", [])
    dataset = IndexedDataset(prefix)
    assert len(dataset) == 0 and dataset[:] == [] and dataset.tokens.shape == (0,)
    assert dataset.document_indices.tolist() == [0]
    assert open(get_bin_path(prefix), "rb").read() == b""


def test_empty_sequences_and_documents(tmp_path):
    documents = [[[]], [], [[1, 2], []], [[3]]]
    prefix = write_dataset(tmp_path / "gaps", documents)
    dataset = IndexedDataset(prefix)
    assert [s.tolist() for s in dataset] == [[], [1, 2], [], [3]]
    assert dataset.document_indices.tolist() == [0, 1, 1, 3, 4]


def test_random_round_trip_int32(tmp_path):
    documents = random_documents(seed=7, vocab=2**31 - 1)
    prefix = write_dataset(tmp_path / "wide", documents, numpy.int32)
    assert [s.tolist() for s in IndexedDataset(prefix, mmap=False)] == _flat(documents)
