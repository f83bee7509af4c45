"""The builder's index in bounded memory: SpooledArray, the streamed .idx and merge.

Every check compares against the in-memory reference (numpy arrays and
:func:`tokenloom.format.spec.write_index`, which writes Megatron's bytes).
"""

from __future__ import annotations

import io
import os

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.format._spool import DEFAULT_BUFFER_ITEMS, SpooledArray
from tokenloom.format.merge_source import _COPY_CHUNK, copy_bin
from tokenloom.format.spec import write_index, write_index_blocks

_SPILLING = DEFAULT_BUFFER_ITEMS * 2 + 12_345  # documents: three blocks of the spool


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), max_size=30),
    st.integers(1, 9),
    st.integers(1, 7),
)
def test_spooled_array_holds_what_was_added(tmp_path_factory, sizes, buffer_items, block):
    folder = str(tmp_path_factory.mktemp("spool"))
    spool = SpooledArray(numpy.int64, folder, "out.bin", [7], buffer_items=buffer_items)
    expected = [7]
    for number, size in enumerate(sizes):
        values = numpy.arange(size, dtype=numpy.int64) + 100 * number
        if size == 1:
            spool.append(int(values[0]))
        else:
            spool.extend(values)
        expected.extend(values.tolist())
    assert len(spool) == len(expected)
    assert spool.last() == expected[-1]
    blocks = [numpy.array(b) for b in spool.blocks(block)]
    assert all(b.shape[0] <= block for b in blocks)
    assert numpy.concatenate(blocks).tolist() == expected
    assert spool.view().tolist() == expected
    assert spool.spilled == 0 or len(expected) > buffer_items
    spool.close()
    assert os.listdir(folder) == []  # the spill file is unlinked from the start


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 1000), max_size=50),
    st.integers(1, 8),
    st.booleans(),
    st.sampled_from([numpy.uint16, numpy.int32]),
)
def test_streamed_index_is_write_index(lengths, block, multimodal, dtype):
    lengths = numpy.array(lengths, dtype=numpy.int32)
    documents = numpy.unique(numpy.concatenate(([0], numpy.arange(0, lengths.size + 1, 3))))
    documents = numpy.append(documents[documents < lengths.size], lengths.size).astype(numpy.int64)
    modes = (numpy.arange(lengths.size) % 3).astype(numpy.int8) if multimodal else None

    def blocks(array):
        return [array[i : i + block] for i in range(0, array.shape[0], block)]

    reference, streamed = io.BytesIO(), io.BytesIO()
    write_index(reference, dtype, lengths, documents, modes)
    write_index_blocks(
        streamed,
        dtype,
        (lengths.size, documents.size),
        lambda: blocks(lengths),
        blocks(documents),
        None if modes is None else blocks(modes),
    )
    assert streamed.getvalue() == reference.getvalue()


def _documents(count: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    lengths = (numpy.arange(count, dtype=numpy.int64) % 5) + 1
    tokens = (numpy.arange(int(lengths.sum())) % 60_000).astype(numpy.uint16)
    return tokens, lengths


def test_a_spilling_builder_writes_megatrons_index(tmp_path):
    tokens, lengths = _documents(_SPILLING)
    builder = IndexedDatasetBuilder(str(tmp_path / "big.bin"), dtype=numpy.uint16)
    builder.add_flat_documents(tokens, lengths)
    builder.add_document([1, 2, 3], [1, 2])  # a document of two sequences
    builder.end_document()  # and an empty one
    builder.finalize(str(tmp_path / "big.idx"))
    all_lengths = numpy.concatenate((lengths, [1, 2])).astype(numpy.int32)
    documents = numpy.concatenate((numpy.arange(_SPILLING + 1), [_SPILLING + 2] * 2))
    reference = io.BytesIO()
    write_index(reference, numpy.uint16, all_lengths, documents)
    assert (tmp_path / "big.idx").read_bytes() == reference.getvalue()
    assert sorted(os.listdir(tmp_path)) == ["big.bin", "big.idx"]  # no spill file left


def test_merging_spilling_pairs_is_byte_identical(tmp_path):
    tokens, lengths = _documents(_SPILLING)
    half = int(lengths[: _SPILLING // 2].sum())
    for name, (t, n) in {
        "whole": (tokens, lengths),
        "a": (tokens[:half], lengths[: _SPILLING // 2]),
        "b": (tokens[half:], lengths[_SPILLING // 2 :]),
    }.items():
        builder = IndexedDatasetBuilder(str(tmp_path / f"{name}.bin"), dtype=numpy.uint16)
        builder.add_flat_documents(t, n)
        builder.finalize(str(tmp_path / f"{name}.idx"))
    merged = IndexedDatasetBuilder(str(tmp_path / "merged.bin"), dtype=numpy.uint16)
    merged.add_index(str(tmp_path / "a"))
    merged.add_index(str(tmp_path / "b"))
    merged.finalize(str(tmp_path / "merged.idx"))
    for suffix in (".bin", ".idx"):
        whole = (tmp_path / f"whole{suffix}").read_bytes()
        assert (tmp_path / f"merged{suffix}").read_bytes() == whole


def test_a_merge_names_a_drop_in_the_document_index_across_blocks(tmp_path):
    tokens, lengths = _documents(_SPILLING)
    builder = IndexedDatasetBuilder(str(tmp_path / "bad.bin"), dtype=numpy.uint16)
    builder.add_flat_documents(tokens, lengths)
    builder.finalize(str(tmp_path / "bad.idx"))
    at = DEFAULT_BUFFER_ITEMS  # the first entry of the second block read
    data = bytearray((tmp_path / "bad.idx").read_bytes())
    offset = 34 + 12 * _SPILLING + 8 * at
    data[offset : offset + 8] = numpy.int64(5).tobytes()
    (tmp_path / "bad.idx").write_bytes(bytes(data))
    merged = IndexedDatasetBuilder(str(tmp_path / "merged.bin"), dtype=numpy.uint16)
    with pytest.raises(FormatError, match=f"not monotone: entry {at} is 5 after {at - 1}"):
        merged.add_index(str(tmp_path / "bad"))
    merged.abort()


def test_copy_bin_goes_through_one_fixed_buffer(tmp_path):
    data = numpy.random.default_rng(3).integers(0, 256, 2 * _COPY_CHUNK + 12345, numpy.uint8)
    path = tmp_path / "part.bin"
    path.write_bytes(data.tobytes())
    nbytes = data.shape[0] - 7  # a prefix: the size the index describes
    copied, sizes, buffers = bytearray(), [], set()

    def write(chunk):
        copied.extend(chunk)
        buffers.add(id(chunk.obj))  # the same buffer every time, not one sized by the file

    copy_bin(str(path), nbytes, write, sizes.append)
    assert bytes(copied) == data.tobytes()[:nbytes]
    assert sizes == [_COPY_CHUNK, _COPY_CHUNK, nbytes - 2 * _COPY_CHUNK]
    assert len(buffers) == 1
    with pytest.raises(FormatError, match="data file shrank while it was being merged"):
        copy_bin(str(path), data.shape[0] + 1, lambda chunk: None, None)
