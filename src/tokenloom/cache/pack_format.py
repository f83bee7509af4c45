"""The pack file's bytes: its layout, written (:func:`pack_entries`) and read back
(:func:`read_table`, :func:`read_entry`)::

    <path_to_cache>/packs/<id>-pack.cache

    bytes 0-7     magic  b"TLIDXP01"
    bytes 8-15    uint64 length T of the table
    bytes 16-19   uint32 CRC32 of the table
    bytes 20-23   zero
    bytes 24-     the table: UTF-8 JSON {"format", "body_bytes", "entries": [[stem,
                  offset, length], ...]}, offsets from the body start
    body start    ``24 + T`` rounded up to 64; the file is body start + body_bytes long
    entries       each at a 64-byte aligned offset, byte for byte the entry file that
                  :meth:`IndexCache.store` would have written (own magic, header CRC,
                  description, per-array CRC32)

Anything wrong with a pack (bad magic, table CRC, size) is reported as damage, never
read as wrong offsets. :mod:`tokenloom.cache.pack` queues and finds entries in packs.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from stat import S_ISREG
from typing import IO, Optional

from tokenloom.untrusted_json import loads_json

__all__ = [
    "OPEN_FLAGS",
    "PACK_DIR",
    "PACK_FORMAT",
    "PACK_SUFFIX",
    "Where",
    "pack_entries",
    "read_entry",
    "read_table",
]

PACK_DIR = "packs"
PACK_FORMAT = "tokenloom-index-pack/1"
PACK_SUFFIX = "-pack.cache"
_MAGIC = b"TLIDXP01"
_PREFIX = struct.Struct("<8sQII")
_ALIGN = 64
_MAX_TABLE_BYTES = 256 * 1024 * 1024  # millions of entries; a longer table is damage
# a FIFO planted in packs/ must not block an open, nor a link lead to another file
OPEN_FLAGS = os.O_RDONLY | sum(getattr(os, f, 0) for f in ("O_NONBLOCK", "O_NOFOLLOW", "O_CLOEXEC"))

Where = tuple[str, int, int]
"""``(pack path, offset, length)`` of one entry."""


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def pack_entries(entries: dict[str, bytes]) -> bytes:
    """The bytes of a pack file holding ``entries`` (see the module docstring)."""
    rows: list[tuple[str, int, int]] = []
    body = 0
    for stem, data in entries.items():
        rows.append((stem, body, len(data)))
        body = _aligned(body + len(data))
    body = rows[-1][1] + rows[-1][2] if rows else 0  # no padding after the last entry
    text = json.dumps(
        {"format": PACK_FORMAT, "body_bytes": body, "entries": [list(row) for row in rows]},
        separators=(",", ":"),
    ).encode()
    start = _aligned(_PREFIX.size + len(text))
    parts = [
        _PREFIX.pack(_MAGIC, len(text), zlib.crc32(text), 0),
        text,
        bytes(start - _PREFIX.size - len(text)),
    ]
    for (_, offset, length), data in zip(rows, entries.values()):
        parts.append(data)
        if offset + length < body:
            parts.append(bytes(_aligned(offset + length) - offset - length))
    return b"".join(parts)


def read_table(handle: IO[bytes], size: int) -> tuple[Optional[dict[str, tuple[int, int]]], str]:
    """``({stem: (absolute offset, length)}, "")`` of the open pack ``handle`` of
    ``size`` bytes, or ``(None, why)`` when it is damaged."""
    read = handle.read
    try:
        magic, length, crc, _ = _PREFIX.unpack(read(_PREFIX.size))
        if length > _MAX_TABLE_BYTES:
            return None, f"its table length {length} exceeds the limit {_MAX_TABLE_BYTES}"
        text = read(length) if magic == _MAGIC and length <= size else b""
        if len(text) != length or zlib.crc32(text) != crc:
            return None, "its table fails its CRC32"
        # bounded in depth: a crafted table with a valid CRC is damaged, not a crash
        record = loads_json(text, source="the table", what="index cache pack", max_depth=8)
        start = _aligned(_PREFIX.size + length)
        body = int(record["body_bytes"])
        if record.get("format") != PACK_FORMAT or start + body != size:
            return None, f"{size} bytes, expected {start + body} (truncated?)"
        rows = record["entries"]
        if type(rows) is not list:
            raise TypeError(f"entries is a {type(rows).__name__}, not a list")
        # the writer writes [str, int, int] rows: any other row is skipped (a miss)
        entries = {
            s: (start + o, n)
            for s, o, n in rows
            if type(s) is str and type(o) is int and type(n) is int and 0 <= o <= body - n
        }
    except (ValueError, KeyError, TypeError, struct.error) as error:
        return None, repr(error)
    return entries, ""


def read_entry(where: Where) -> bytes:
    """The bytes of the entry at ``where`` (OSError when the pack is gone or short)."""
    path, offset, length = where
    fd = os.open(path, OPEN_FLAGS)  # a FIFO swapped in since the listing must not block
    try:
        if not S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    if len(data) != length:
        raise OSError(f"{path}: {len(data)} bytes at {offset}, expected {length}")
    return data
