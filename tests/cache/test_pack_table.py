"""The pack table as untrusted input: the binary (version 2) table round-trips, a
version 1 (JSON) pack written by an older tokenloom is still read, and crafted tables
(valid CRC, nonsense inside) are damage or misses, never a crash or a wrong offset."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib

import numpy
import pytest

from tokenloom.cache import pack_format

_PREFIX = struct.Struct("<8sQII")


def _aligned(n: int) -> int:
    return -(-n // 64) * 64


def _with_table(magic: bytes, table: bytes, body: bytes) -> bytes:
    """A pack of ``body`` under ``table`` (CRC computed: the inside is what is tested)."""
    head = _PREFIX.pack(magic, len(table), zlib.crc32(table), 0) + table
    return head + bytes(_aligned(len(head)) - len(head)) + body


def _version1(entries: dict[str, bytes]) -> bytes:
    """A pack as tokenloom wrote it before version 2 (a JSON table)."""
    rows, body, parts = [], 0, []
    for stem, data in entries.items():
        rows.append([stem, body, len(data)])
        parts.append(data + bytes(_aligned(len(data)) - len(data)))
        body = _aligned(body + len(data))
    body_bytes = rows[-1][1] + rows[-1][2]
    text = json.dumps(
        {"format": "tokenloom-index-pack/1", "body_bytes": body_bytes, "entries": rows},
        separators=(",", ":"),
    ).encode()
    return _with_table(b"TLIDXP01", text, b"".join(parts)[:body_bytes])


def _table(data: bytes):
    return pack_format.read_table(io.BytesIO(data), len(data))


ENTRIES = {f"{i:032x}-GPTDataset-train": bytes([i + 1]) * (i * 53 + 7) for i in range(9)}


def _check_served(data: bytes, entries: dict[str, bytes]) -> None:
    table, why = _table(data)
    assert why == "" and table is not None and set(table) == set(entries)
    for stem, payload in entries.items():
        offset, length = table[stem]
        assert offset % 64 == 0 and data[offset : offset + length] == payload


def test_binary_table_round_trips_with_non_ascii_and_empty():
    entries = dict(ENTRIES, **{"\u00e9t\u00e9-Cl\u00e4ss-valid": b"xyz"})
    data = pack_format.pack_entries(entries)
    assert data[:8] == b"TLIDXP02"
    _check_served(data, entries)
    assert _table(pack_format.pack_entries({})) == ({}, "")


def test_version_1_packs_are_still_read():
    _check_served(_version1(ENTRIES), ENTRIES)


def _binary(body: int, offsets, lengths, ends, stems: bytes) -> bytes:
    n = len(offsets)
    return b"".join(
        [
            struct.pack("<QQ", body, n),
            numpy.asarray(offsets, "<u8").tobytes(),
            numpy.asarray(lengths, "<u8").tobytes(),
            numpy.asarray(ends, "<u4").tobytes(),
            stems,
        ]
    )


@pytest.mark.parametrize(
    "table",
    [
        _binary(64, [0, 0], [8, 8], [2, 1], b"ab"),  # stem ends out of order
        _binary(64, [0], [8], [3], b"ab"),  # an end past the stems
        _binary(64, [0], [8], [1], b"ab"),  # bytes left after the last stem
        _binary(64, [0], [8], [2], b"\xff\xfe"),  # not UTF-8
        _binary(64, [], [], [], b"x"),  # stems of no entry
        struct.pack("<QQ", 64, 10**12),  # more rows than bytes
        struct.pack("<Q", 64),  # no count
        b"",
    ],
)
def test_crafted_binary_tables_are_damage(table):
    found, why = _table(_with_table(b"TLIDXP02", table, bytes(64)))
    assert found is None and why


def test_rows_outside_the_body_are_misses_not_offsets():
    table = _binary(64, [0, 60, 2**64 - 8], [8, 8, 16], [1, 2, 3], b"abc")
    found, why = _table(_with_table(b"TLIDXP02", table, bytes(64)))
    assert why == "" and found == {"a": (_aligned(_PREFIX.size + len(table)), 8)}


def test_unknown_magic_and_wrong_size_are_damage():
    data = pack_format.pack_entries(ENTRIES)
    assert _table(b"TLIDXP09" + data[8:])[0] is None
    assert pack_format.read_table(io.BytesIO(data + b"\0"), len(data) + 1)[0] is None
    assert _table(data[:-1])[0] is None


@pytest.mark.parametrize("version", [1, 2])
def test_mutated_tables_never_crash_or_point_outside(version):
    """Random byte flips inside the table, the CRC fixed up: every answer is damage or
    entries that lie inside the file."""
    data = _version1(ENTRIES) if version == 1 else pack_format.pack_entries(ENTRIES)
    magic, length, _, _ = _PREFIX.unpack_from(data)
    table, rest = data[_PREFIX.size : _PREFIX.size + length], data[_PREFIX.size + length :]
    rng = random.Random(version)
    for _ in range(400):
        mutated = bytearray(table)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        crafted = _PREFIX.pack(magic, length, zlib.crc32(bytes(mutated)), 0) + mutated + rest
        found, why = _table(bytes(crafted))
        if found is None:
            assert why
            continue
        for offset, size in found.values():
            assert 0 <= offset and offset + size <= len(crafted)
