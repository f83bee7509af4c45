"""What opening a pair checks: pointers (overlaps, gaps), and a .bin whose size says
that the dtype code is wrong; plus clear errors for symlink loops and eod/pad ids."""

from __future__ import annotations

import os
import struct
import warnings

import numpy
import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.datasets import GPTDatasetConfig
from tokenloom.errors import ConfigError, FormatError
from tokenloom.format import IndexedDataset
from tokenloom.format.open_checks import SuspiciousDataFileWarning, check_sequence_pointers
from tokenloom.format.spec import write_index

HEADER = 34


def _pointer_offset(count: int, i: int) -> int:
    return HEADER + 4 * count + 8 * i


def _patch(path: str, offset: int, fmt: str, value: int) -> None:
    data = bytearray(open(path, "rb").read())
    struct.pack_into(fmt, data, offset, value)
    open(path, "wb").write(bytes(data))


def test_overlapping_pointer_is_refused_at_open(tmp_path):
    prefix = write_corpus(tmp_path / "c", [10] * 8)
    pointer_4 = IndexedDataset(prefix).sequence_pointers[4]
    _patch(prefix + ".idx", _pointer_offset(8, 5), "<q", int(pointer_4))  # pointer[5] = pointer[4]
    with pytest.raises(
        FormatError,
        match=r"c\.idx: sequence 5 has pointer 80, but sequence 4 "
        r"\(length 10\) ends at byte 100",
    ):
        IndexedDataset(prefix)
    trusted = IndexedDataset(prefix, fast_cache_load=True)  # the user's explicit opt-out
    assert trusted[5].tolist() == trusted[4].tolist()


def test_first_pointer_must_be_zero_and_a_clean_index_passes():
    lengths = numpy.array([3, 0, 5], dtype=numpy.int32)
    check_sequence_pointers(lengths, numpy.array([0, 6, 6], dtype=numpy.int64), 2, "x.idx")
    with pytest.raises(FormatError, match="sequence 0 has pointer 2"):
        check_sequence_pointers(lengths, numpy.array([2, 8, 8], dtype=numpy.int64), 2, "x.idx")


def test_pointer_check_crosses_chunk_boundaries(monkeypatch):
    from tokenloom.format import open_checks

    monkeypatch.setattr(open_checks, "_CHUNK", 7)
    lengths = numpy.random.default_rng(0).integers(0, 50, 100).astype(numpy.int32)
    pointers = numpy.concatenate([[0], numpy.cumsum(lengths[:-1].astype(numpy.int64) * 4)])
    check_sequence_pointers(lengths, pointers, 4, "x.idx")
    for at in (1, 6, 7, 8, 14, 99):
        bad = pointers.copy()
        bad[at] += 4
        with pytest.raises(FormatError, match=f"sequence {at} has pointer"):
            check_sequence_pointers(lengths, bad, 4, "x.idx")


def test_dtype_code_rewritten_narrower_warns(tmp_path):
    prefix = write_corpus(tmp_path / "c", [10] * 8)  # uint16 tokens: code 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        IndexedDataset(prefix)  # the honest pair: no warning
    _patch(prefix + ".idx", 17, "<B", 1)  # code 1: uint8; the pointers now disagree
    with pytest.raises(FormatError, match=r"sequence 1 has pointer 20, but sequence 0"):
        IndexedDataset(prefix)
    with open(prefix + ".idx", "wb") as handle:  # a consistent uint8 index over a uint16 .bin
        write_index(handle, numpy.uint8, numpy.full(8, 10, numpy.int32), numpy.arange(9))
    with pytest.warns(SuspiciousDataFileWarning, match=r"c\.bin: the data file is exactly 2x"):
        IndexedDataset(prefix)


def test_bin_with_an_honest_extra_tail_does_not_warn(tmp_path):
    prefix = write_corpus(tmp_path / "c", [10] * 8)
    with open(prefix + ".bin", "ab") as handle:
        handle.write(b"\0" * 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(IndexedDataset(prefix)) == 8


def test_symlink_loop_is_a_format_error_naming_the_file(tmp_path):
    os.symlink(tmp_path / "loop.idx", tmp_path / "loop.idx")
    with pytest.raises(
        FormatError,
        match=r"loop\.idx: cannot open the index file: Too many "
        r"levels of symbolic links",
    ):
        IndexedDataset(str(tmp_path / "loop"))


@pytest.mark.parametrize(
    "tokenizer, match",
    [
        (
            {"vocab_size": 100, "eod": 100},
            r"tokenizer\.eod = 100 is not a token id.*vocab_size 100",
        ),
        ({"vocab_size": 100, "eod": 1, "pad": 250}, r"tokenizer\.pad = 250"),
        ({"vocab_size": 100, "eod": -1}, r"tokenizer\.eod ?= ?-1"),
    ],
)
def test_eod_or_pad_outside_the_vocabulary_is_refused(tokenizer, match):
    with pytest.raises(ConfigError, match=match):
        GPTDatasetConfig(
            random_seed=1,
            sequence_length=8,
            blend=(["x"], None),
            split="1",
            tokenizer=tokenizer,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
    ok = dict(tokenizer, eod=1, pad=-1)  # pad -1: Megatron's "no pad token"
    GPTDatasetConfig(
        random_seed=1,
        sequence_length=8,
        blend=(["x"], None),
        split="1",
        tokenizer=ok,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
