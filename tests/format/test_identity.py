"""The file identity covers every byte of the ``.idx``: no edit can go unseen, also when
the size and mtime are restored; and its digests are remembered within bounds."""

from __future__ import annotations

import hashlib
import os
import struct

import numpy
import pytest
from tests.support.random_corpora import EOD

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.format.identity import DIGEST_NAME, digest_bytes, file_identity
from tokenloom.process_caches import IDX_DIGESTS, clear_process_caches


def _write(prefix: str, lengths: list) -> str:
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    rng = numpy.random.default_rng(3)  # one sequence per document, all in one call
    builder.add_flat_documents(rng.integers(1, 1000, size=sum(lengths)), lengths)
    builder.finalize(prefix + ".idx")
    return prefix


@pytest.mark.parametrize("size", [0, 10, 1 << 18, (1 << 20) + 7, (3 << 20) + 123])
def test_digest_of_bytes_equals_the_file_identity(tmp_path, size):
    data = os.urandom(size)
    prefix = str(tmp_path / "p")
    open(prefix + ".idx", "wb").write(data)
    open(prefix + ".bin", "wb").close()
    assert digest_bytes(data) == file_identity(prefix)["idx"][DIGEST_NAME]
    expected = DIGEST_NAME in ("xxh3_128", "blake2b_128")
    assert expected and len(digest_bytes(data)) == 32


def test_any_single_byte_of_a_large_file_changes_the_digest():
    data = bytearray(os.urandom(3 << 20))
    before = digest_bytes(bytes(data))
    for at in (0, len(data) // 3, len(data) // 2, len(data) - 1):
        data[at] ^= 0xFF
        assert digest_bytes(bytes(data)) != before
        data[at] ^= 0xFF
    assert digest_bytes(bytes(data)) == before


def _edit_middle_keeping_size_and_mtime(prefix: str, count: int) -> None:
    path = prefix + ".idx"
    stat = os.stat(path)
    middle = count // 2  # move one token from sequence middle + 1 to sequence middle:
    with open(path, "r+b") as handle:  # lengths 9, 9 -> 10, 8 and the pointer of
        handle.seek(34 + 4 * middle)  # middle + 1 moved by one uint16, so the .idx stays
        handle.write(struct.pack("<ii", 10, 8))  # valid (the open checks pass) and only
        handle.seek(34 + 4 * count + 8 * (middle + 1))  # its identity can see the change
        (pointer,) = struct.unpack("<q", handle.read(8))
        handle.seek(-8, os.SEEK_CUR)
        handle.write(struct.pack("<q", pointer + 2))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_size == stat.st_size and os.stat(path).st_mtime_ns == stat.st_mtime_ns


def _build(prefix: str, cache: str) -> GPTDataset:
    config = GPTDatasetConfig(
        random_seed=4,
        sequence_length=32,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=cache,
        blend=([prefix], None),
    )
    dataset = BlendedMegatronDatasetBuilder(GPTDataset, [2000, 0, 0], lambda: True, config).build()[
        0
    ]
    return dataset


@pytest.mark.parametrize("new_process", [False, True])
def test_middle_edit_of_a_large_idx_with_size_and_mtime_restored_is_not_served_stale(
    tmp_path, new_process
):
    count = 60_000  # the lengths alone span 240 KB, the .idx over 1 MB (> 512 KiB)
    prefix = _write(str(tmp_path / "big"), [9] * count)
    assert os.path.getsize(prefix + ".idx") > 512 << 10
    cache = str(tmp_path / "cache")
    stale = _build(prefix, cache)
    before = file_identity(prefix)
    _edit_middle_keeping_size_and_mtime(prefix, count)
    if new_process:
        clear_process_caches()  # nothing remembered: the whole file is hashed again
    assert file_identity(prefix) != before
    warm = _build(prefix, cache)
    fresh = _build(prefix, str(tmp_path / "fresh"))
    assert warm.cache_key.stem != stale.cache_key.stem
    assert warm.cache_key.stem == fresh.cache_key.stem
    assert numpy.array_equal(warm.sample_index, fresh.sample_index)
    assert not numpy.array_equal(warm.sample_index, stale.sample_index)


def test_identity_of_an_open_dataset_is_that_of_its_files(tmp_path):
    prefix = _write(str(tmp_path / "d"), [5, 7, 3])
    with IndexedDataset(prefix) as dataset:
        assert dataset.file_identity() == file_identity(prefix)
        digest = hashlib.blake2b(open(prefix + ".idx", "rb").read(), digest_size=16).hexdigest()
        assert DIGEST_NAME != "blake2b_128" or dataset.file_identity()["idx"][DIGEST_NAME] == digest


def test_digest_memo_is_bounded_and_cleared(tmp_path):
    prefix = _write(str(tmp_path / "d"), [5, 7, 3])
    clear_process_caches()
    file_identity(prefix)
    assert len(IDX_DIGESTS) == 1 and IDX_DIGESTS.bound >= 4096
    clear_process_caches()
    assert len(IDX_DIGESTS) == 0
