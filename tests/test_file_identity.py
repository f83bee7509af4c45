"""The sampled MD5 of a file's bytes (cold-start reads) equals the one read from disk."""

from __future__ import annotations

import os

import pytest

from tokenloom._file_identity import IDENTITY_SAMPLE_BYTES, file_identity, sampled_md5


@pytest.mark.parametrize("size", [0, 10, IDENTITY_SAMPLE_BYTES, IDENTITY_SAMPLE_BYTES + 7,
                                  2 * IDENTITY_SAMPLE_BYTES, 2 * IDENTITY_SAMPLE_BYTES + 1,
                                  3 * IDENTITY_SAMPLE_BYTES + 123])
def test_sampled_md5_of_bytes_equals_the_file_identity(tmp_path, size):
    data = os.urandom(size)
    prefix = str(tmp_path / "p")
    with open(prefix + ".idx", "wb") as handle:
        handle.write(data)
    open(prefix + ".bin", "wb").close()
    assert sampled_md5(data) == file_identity(prefix)["idx"]["md5_head_tail"]


def test_middle_bytes_of_a_large_file_are_not_sampled():
    size = 3 * IDENTITY_SAMPLE_BYTES
    data = bytearray(os.urandom(size))
    before = sampled_md5(bytes(data))
    data[size // 2] ^= 0xFF
    assert sampled_md5(bytes(data)) == before
    data[5] ^= 0xFF
    assert sampled_md5(bytes(data)) != before
