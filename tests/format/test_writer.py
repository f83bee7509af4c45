"""IndexedDatasetBuilder: input kinds, add_documents, add_index, atomic publication."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.format_files import random_documents, write_dataset

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder


def _tokens_of(prefix):
    return [s.tolist() for s in IndexedDataset(prefix)]


def _build(tmp_path, name="out", dtype=numpy.uint16, multimodal=False):
    return IndexedDatasetBuilder(tmp_path / f"{name}.bin", dtype=dtype, multimodal=multimodal)


def test_accepts_numpy_lists_and_torch(tmp_path):
    torch = pytest.importorskip("torch")
    builder = _build(tmp_path, dtype=numpy.int32)
    builder.add_item(numpy.array([1, 2, 3], dtype=numpy.int64))
    builder.add_item([4, 5])
    builder.add_item(torch.tensor([6, 7, 8, 9]))
    builder.add_item(numpy.array([10.0, 11.0]))  # integral floats are exact
    builder.end_document()
    builder.add_document(torch.tensor([1, 2, 3]), torch.tensor([2, 1]))
    builder.finalize(tmp_path / "out.idx")
    assert _tokens_of(str(tmp_path / "out")) == [
        [1, 2, 3],
        [4, 5],
        [6, 7, 8, 9],
        [10, 11],
        [1, 2],
        [3],
    ]
    assert IndexedDataset(str(tmp_path / "out")).document_indices.tolist() == [0, 4, 6]


@pytest.mark.parametrize("chunk_size", [1, 7, 1_000_000])
@pytest.mark.parametrize("eod", [None, 2])
def test_add_documents_matches_add_item(tmp_path, chunk_size, eod):
    rng = numpy.random.default_rng(chunk_size)
    documents = [rng.integers(0, 60000, rng.integers(0, 30)) for _ in range(50)]
    builder = _build(tmp_path, "bulk")
    builder.add_documents(documents, eod_token=eod, chunk_size=chunk_size)
    builder.finalize(tmp_path / "bulk.idx")
    expected = [[doc.tolist() + ([eod] if eod is not None else [])] for doc in documents]
    reference = write_dataset(tmp_path / "ref", expected)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"bulk{ext}").read_bytes() == open(reference + ext, "rb").read()


def test_add_documents_awkward_and_generator(tmp_path):
    awkward = pytest.importorskip("awkward")
    documents = [[5, 6, 7], [], [8], [9, 10]]
    builder = _build(tmp_path, "ak")
    builder.add_documents(awkward.Array(documents), eod_token=0, chunk_size=3)
    builder.add_documents(iter([[1], [2, 3]]))
    builder.finalize(tmp_path / "ak.idx")
    dataset = IndexedDataset(str(tmp_path / "ak"))
    assert [s.tolist() for s in dataset] == [[5, 6, 7, 0], [0], [8, 0], [9, 10, 0], [1], [2, 3]]
    assert dataset.document_indices.tolist() == list(range(7))


def test_add_documents_multimodal_modes(tmp_path):
    builder = _build(tmp_path, "mm", multimodal=True)
    builder.add_documents([[1], [2, 3], [4]], modes=[1, -1, 3], chunk_size=2)
    builder.finalize(tmp_path / "mm.idx")
    assert IndexedDataset(str(tmp_path / "mm"), multimodal=True).sequence_modes.tolist() == [
        1,
        -1,
        3,
    ]
    builder = _build(tmp_path, "bad", multimodal=True)
    with pytest.raises(FormatError, match="3 modes for 2 documents"):
        builder.add_documents([[1], [2]], modes=[1, 2, 3])
    with pytest.raises(FormatError, match="not multimodal"):
        _build(tmp_path, "plain").add_documents([[1]], modes=[1])


def test_add_index_concatenates_documents(tmp_path):
    first = write_dataset(tmp_path / "a", random_documents(1))
    second = write_dataset(tmp_path / "b", random_documents(2))
    builder = _build(tmp_path, "merged")
    builder.add_item([42])
    builder.end_document()
    seen = []
    builder.add_index(first, progress=seen.append)
    builder.add_index(second)
    builder.finalize(tmp_path / "merged.idx")
    merged = IndexedDataset(str(tmp_path / "merged"))
    assert _tokens_of(str(tmp_path / "merged")) == [[42]] + _tokens_of(first) + _tokens_of(second)
    a, b = IndexedDataset(first).document_indices, IndexedDataset(second).document_indices
    expected = [0, 1] + (1 + a[1:]).tolist() + (1 + a[-1] + b[1:]).tolist()
    assert merged.document_indices.tolist() == expected
    assert sum(seen) == os.path.getsize(first + ".bin")


@pytest.mark.parametrize(
    "value, dtype",
    [
        (70000, numpy.uint16),
        (-1, numpy.uint16),
        (2**31, numpy.int32),
        (300, numpy.uint8),
        (1.5, numpy.int32),
        (2**70, numpy.int64),
    ],
)
def test_token_that_does_not_fit_is_refused(tmp_path, value, dtype):
    builder = _build(tmp_path, dtype=dtype)
    with pytest.raises(FormatError, match="out.bin"):
        builder.add_item([1, value])
    with pytest.raises(FormatError, match="out.bin"):
        builder.add_documents([[1], [value]])
    with pytest.raises(FormatError, match="out.bin"):
        builder.add_document([value], [1])


def test_fit_check_names_token_and_position(tmp_path):
    with pytest.raises(FormatError, match=r"token 70000 at position 2 does not fit uint16"):
        _build(tmp_path).add_item(numpy.array([1, 2, 70000], dtype=numpy.int64))
    with pytest.raises(FormatError, match="eod_token"):
        _build(tmp_path).add_documents([[1]], eod_token=-1)


def test_bad_lengths_and_modes(tmp_path):
    builder = _build(tmp_path, multimodal=True)
    with pytest.raises(FormatError, match="lengths sum to 3"):
        builder.add_document([1, 2], [1, 2])
    with pytest.raises(FormatError, match="int8"):
        builder.add_item([1], mode=200)
    with pytest.raises(FormatError, match="0..2147483647"):
        builder.add_document([1], [2, -1])


def test_finalize_requires_closed_document(tmp_path):
    builder = _build(tmp_path)
    builder.add_item([1, 2])
    with pytest.raises(FormatError, match="end_document"):
        builder.finalize(tmp_path / "out.idx")
    builder.end_document()
    builder.finalize(tmp_path / "out.idx")
    with pytest.raises(FormatError, match="finalized"):
        builder.add_item([3])


def _leftovers(tmp_path):
    """Files left in the folder, apart from the publish lock (which stays, by design)."""
    return sorted(p.name for p in tmp_path.iterdir() if p.name != ".tokenloom-publish.lock")


def test_abandoned_builder_leaves_nothing_openable(tmp_path):
    builder = _build(tmp_path)
    builder.add_item([1, 2, 3])
    builder.end_document()
    assert not IndexedDataset.exists(str(tmp_path / "out"))
    assert not (tmp_path / "out.bin").exists()
    del builder
    assert _leftovers(tmp_path) == []
    with _build(tmp_path) as builder:
        builder.add_item([1])
    assert _leftovers(tmp_path) == []


def test_existing_pair_intact_until_finalize(tmp_path):
    old = write_dataset(tmp_path / "out", [[[7, 7, 7]]])
    before = {ext: open(old + ext, "rb").read() for ext in (".bin", ".idx")}
    builder = _build(tmp_path)
    builder.add_documents([[1, 2], [3]])
    for ext, data in before.items():
        assert open(old + ext, "rb").read() == data
    assert _tokens_of(old) == [[7, 7, 7]]
    builder.abort()
    assert _tokens_of(old) == [[7, 7, 7]] and _leftovers(tmp_path) == ["out.bin", "out.idx"]
    builder = _build(tmp_path)
    builder.add_documents([[1, 2], [3]])
    builder.finalize(tmp_path / "out.idx")
    assert _tokens_of(old) == [[1, 2], [3]] and _leftovers(tmp_path) == ["out.bin", "out.idx"]


def test_unsupported_dtype(tmp_path):
    with pytest.raises(FormatError, match="uint32"):
        IndexedDatasetBuilder(tmp_path / "x.bin", dtype=numpy.uint32)
    assert _leftovers(tmp_path) == []


def test_add_flat_documents_matches_add_documents(tmp_path):
    rng = numpy.random.default_rng(11)
    lengths = rng.integers(0, 20, 40)
    flat = rng.integers(0, 65000, int(lengths.sum()))
    documents = numpy.split(flat, numpy.cumsum(lengths[:-1]))
    for name, eod in (("a", None), ("b", 1)):
        flat_builder = _build(tmp_path, f"flat_{name}")
        flat_builder.add_flat_documents(flat, lengths, eod_token=eod)
        flat_builder.finalize(tmp_path / f"flat_{name}.idx")
        list_builder = _build(tmp_path, f"list_{name}")
        list_builder.add_documents(documents, eod_token=eod, chunk_size=50)
        list_builder.finalize(tmp_path / f"list_{name}.idx")
        for ext in ("bin", "idx"):
            assert (tmp_path / f"flat_{name}.{ext}").read_bytes() == (
                tmp_path / f"list_{name}.{ext}"
            ).read_bytes()
    with pytest.raises(FormatError, match="lengths sum to 3 but there are 2 tokens"):
        _build(tmp_path, "bad").add_flat_documents([1, 2], [1, 2])


def test_builder_bookkeeping_is_plain_lists_with_default_modes(tmp_path):
    """megatron-core's builder attributes are lists; a multimodal document without modes
    gets mode 0 per sequence (Megatron-LM main's regression test, in tokenloom's words)."""
    builder = IndexedDatasetBuilder(str(tmp_path / "mm.bin"), dtype=numpy.int32, multimodal=True)
    builder.add_document(numpy.array([1, 2, 3, 4, 5], dtype=numpy.int32), [3, 2])
    builder.add_document(numpy.array([6, 7], dtype=numpy.int32), [2])
    assert builder.sequence_lengths == [3, 2, 2]
    assert builder.sequence_modes == [0, 0, 0]
    assert builder.document_indices == [0, 2, 3]
    builder.add_document(numpy.array([8], dtype=numpy.int32), [1], modes=[4])
    assert builder.sequence_modes == [0, 0, 0, 4]
