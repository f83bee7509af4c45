"""The pack file's bytes: its layout, written (:func:`pack_entries`) and read back
(:func:`read_table`, :func:`read_entry`)::

    <path_to_cache>/packs/<id>-pack.cache

    bytes 0-7     magic  b"TLIDXP02" (b"TLIDXP01": the version 1 table, still read)
    bytes 8-15    uint64 length T of the table
    bytes 16-19   uint32 CRC32 of the table
    bytes 20-23   zero
    bytes 24-     the table, little-endian:
                    uint64 body_bytes, uint64 N (entries),
                    uint64 offset[N] (from the body start), uint64 length[N],
                    uint32 stem_end[N] (end of each stem in the stems' bytes),
                    the stems, UTF-8, back to back
                  (version 1: UTF-8 JSON {"format", "body_bytes", "entries": [[stem,
                  offset, length], ...]})
    body start    ``24 + T`` rounded up to 64; the file is body start + body_bytes long
    entries       each at a 64-byte aligned offset, byte for byte the entry file that
                  :meth:`IndexCache.store` would have written (own magic, header CRC,
                  description, per-array CRC32)

The table is untrusted input: anything wrong with it (bad magic, CRC, size, counts
that do not add up, stem ends out of order, bytes that are not UTF-8) is reported as
damage, never read as wrong offsets; a row whose entry lies outside the body is
skipped (a miss). The binary table reads in a few array views where the JSON one took
a parse of every row (10,000 entries: about 20 ms). :mod:`tokenloom.cache.pack`
queues and finds entries in packs.
"""

from __future__ import annotations

import os
import struct
import zlib
from itertools import accumulate, repeat
from stat import S_ISREG
from typing import IO, Optional

import numpy

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
    "read_where",
]

PACK_DIR = "packs"
PACK_FORMAT = "tokenloom-index-pack/2"
PACK_SUFFIX = "-pack.cache"
_MAGIC = b"TLIDXP02"
_MAGIC_JSON = b"TLIDXP01"  # version 1: a JSON table (format "tokenloom-index-pack/1")
_FORMAT_JSON = "tokenloom-index-pack/1"
_PREFIX = struct.Struct("<8sQII")
_COUNTS = struct.Struct("<QQ")  # body_bytes, N
_ROW_BYTES = 8 + 8 + 4  # offset, length, stem end
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
    offsets: list[int] = []
    body = 0
    for data in entries.values():
        offsets.append(body)
        body = _aligned(body + len(data))
    lengths = [len(data) for data in entries.values()]
    body = offsets[-1] + lengths[-1] if offsets else 0  # no padding after the last entry
    stems = [stem.encode("utf-8") for stem in entries]
    text = b"".join(
        [
            _COUNTS.pack(body, len(stems)),
            numpy.asarray(offsets, dtype="<u8").tobytes(),
            numpy.asarray(lengths, dtype="<u8").tobytes(),
            numpy.asarray(list(accumulate(map(len, stems))), dtype="<u4").tobytes(),
            *stems,
        ]
    )
    start = _aligned(_PREFIX.size + len(text))
    parts = [
        _PREFIX.pack(_MAGIC, len(text), zlib.crc32(text), 0),
        text,
        bytes(start - _PREFIX.size - len(text)),
    ]
    for offset, length, data in zip(offsets, lengths, entries.values()):
        parts.append(data)
        if offset + length < body:
            parts.append(bytes(_aligned(offset + length) - offset - length))
    return b"".join(parts)


Table = dict[str, tuple[int, int]]


def read_table(handle: IO[bytes], size: int) -> tuple[Optional[Table], str]:
    """``({stem: (absolute offset, length)}, "")`` of the open pack ``handle`` of
    ``size`` bytes, or ``(None, why)`` when it is damaged."""
    table, why = read_where(handle, size, "")
    return None if table is None else {s: (o, n) for s, (_, o, n) in table.items()}, why


def read_where(handle: IO[bytes], size: int, path: str) -> tuple[Optional[dict[str, Where]], str]:
    """``({stem: (path, absolute offset, length)}, "")`` of the open pack ``handle`` of
    ``size`` bytes at ``path``, or ``(None, why)`` when it is damaged."""
    read = handle.read
    try:
        magic, length, crc, _ = _PREFIX.unpack(read(_PREFIX.size))
        if length > _MAX_TABLE_BYTES:
            return None, f"its table length {length} exceeds the limit {_MAX_TABLE_BYTES}"
        known = magic in (_MAGIC, _MAGIC_JSON)
        text = read(length) if known and length <= size else b""
        if len(text) != length or zlib.crc32(text) != crc or not known:
            return None, "its table fails its CRC32"
        start = _aligned(_PREFIX.size + length)
        if magic == _MAGIC:
            body, entries = _binary_table(text, start, path)
        else:
            body, entries = _json_table(text, start, path)
        if start + body != size:
            return None, f"{size} bytes, expected {start + body} (truncated?)"
    except (ValueError, KeyError, TypeError, struct.error) as error:
        return None, repr(error)
    return entries, ""


def _binary_table(text: bytes, start: int, path: str) -> tuple[int, dict[str, Where]]:
    """``(body_bytes, {stem: (path, start + offset, length)})`` of a version 2 table (ValueError
    when its parts do not add up; rows outside the body are skipped)."""
    body, count = _COUNTS.unpack_from(text)
    if count > (len(text) - _COUNTS.size) // _ROW_BYTES:
        raise ValueError(f"{count} entries do not fit a table of {len(text)} bytes")
    at = _COUNTS.size
    offsets = numpy.frombuffer(text, "<u8", count, at)
    lengths = numpy.frombuffer(text, "<u8", count, at + 8 * count)
    ends = numpy.frombuffer(text, "<u4", count, at + 16 * count).astype(numpy.int64)
    blob = text[at + _ROW_BYTES * count :]
    if count and (ends[-1] != len(blob) or bool((ends[1:] < ends[:-1]).any())):
        raise ValueError("the stem ends are out of order or miss the stems' bytes")
    if not count and blob:
        raise ValueError(f"{len(blob)} bytes of stems for no entry")
    bounds = [0, *ends.tolist()]
    if blob.isascii():  # stems are ASCII (hex-Class-split): one decode, str slices
        whole = blob.decode("ascii")
        stems = [whole[a:b] for a, b in zip(bounds, bounds[1:])]
    else:
        stems = [blob[a:b].decode("utf-8") for a, b in zip(bounds, bounds[1:])]
    inside = (offsets <= body) & (lengths <= body - numpy.minimum(offsets, body))
    if not bool(inside.all()):  # the writer writes rows inside the body: skip others
        stems = [stem for stem, ok in zip(stems, inside.tolist()) if ok]
        offsets, lengths = offsets[inside], lengths[inside]
    where = zip(repeat(path), (offsets + start).tolist(), lengths.tolist())
    return int(body), dict(zip(stems, where))


def _json_table(text: bytes, start: int, path: str) -> tuple[int, dict[str, Where]]:
    """``(body_bytes, {stem: (path, start + offset, length)})`` of a version 1 (JSON) table."""
    # bounded in depth: a crafted table with a valid CRC is damaged, not a crash
    record = loads_json(text, source="the table", what="index cache pack", max_depth=8)
    body = int(record["body_bytes"])
    if record.get("format") != _FORMAT_JSON:
        raise ValueError(f"format {record.get('format')!r}, not {_FORMAT_JSON!r}")
    rows = record["entries"]
    if type(rows) is not list:
        raise TypeError(f"entries is a {type(rows).__name__}, not a list")
    # the writer writes [str, int, int] rows: any other row is skipped (a miss)
    return body, {
        s: (path, start + o, n)
        for s, o, n in rows
        if type(s) is str and type(o) is int and type(n) is int and 0 <= o <= body - n
    }


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
