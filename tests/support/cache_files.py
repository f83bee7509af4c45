"""Test helpers for tokenloom index-cache entry files: read, edit and damage them."""

from __future__ import annotations

import json
import struct
import zlib

from tokenloom.cache import entry as cache_file


def header(path):
    """(record, data start) of a cache entry file."""
    with open(path, "rb") as handle:
        return cache_file.read_record(handle, str(path))


def rewrite_header(path, record):
    """Re-encode the header of ``path`` with a valid CRC (the data keeps its offsets):
    what a deliberate edit of the description looks like."""
    _, start = header(path)
    data = open(path, "rb").read()[start:]
    text = json.dumps(record, separators=(",", ":")).encode()
    prefix = struct.pack("<8sQII", cache_file.MAGIC, len(text), zlib.crc32(text), 0)
    padding = -(-(len(prefix) + len(text)) // 64) * 64 - len(prefix) - len(text)
    open(path, "wb").write(prefix + text + bytes(padding) + data)


def array_extent(path, name):
    """(first byte, byte count) of array ``name`` in the file."""
    record, start = header(path)
    meta = record["arrays"][name]
    return start + meta["offset"], meta["nbytes"]


def flip_byte_of(path, name, at=5):
    """Flip one byte inside array ``name`` (same size: only a CRC32 can see it)."""
    first, _ = array_extent(path, name)
    data = bytearray(open(path, "rb").read())
    data[first + at] ^= 0xFF
    open(path, "wb").write(bytes(data))
