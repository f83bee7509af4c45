"""One index-cache entry in one file: its description and its arrays.

An entry is a single file (one temporary file, one rename), written atomically but
not fsynced (a cache is rebuildable and validated on every read). Layout (little
endian)::

    bytes 0-7     magic  b"TLIDXC03"
    bytes 8-15    uint64 length H of the header
    bytes 16-19   uint32 CRC32 of the header
    bytes 20-23   zero
    bytes 24-     the header: UTF-8 JSON, readable with ``head -c``: format, class,
                  split, hash, description, checks, and per array its dtype, shape,
                  nbytes, CRC32 and offset (from the data start)
    data start    ``24 + H`` rounded up to 64; every array at a 64-byte aligned offset
    file size     data start + "data_bytes" (the end of the last array) from the header;
                  a truncated or extended file is corrupt

Reading checks the magic, the header CRC, the header's size and nesting
(:mod:`tokenloom.untrusted_json`), every array's dtype/shape/extent and the
file size, and the array CRC32s when asked (``verify="checksum"``); any mismatch is
:class:`Corrupt`. Arrays are memory-mapped with no file descriptor kept open
(:func:`tokenloom.format._mapping.map_readonly`). :func:`read_entry` also checks the
header against the :class:`~tokenloom.cache.keys.CacheKey` it is looked up by.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii
from typing import IO, Optional, Union

import numpy

from tokenloom.atomic import atomic_open
from tokenloom.cache.keys import CacheKey, describe, description_hash
from tokenloom.format._mapping import map_or_read
from tokenloom.untrusted_json import loads_json

__all__ = [
    "CACHE_FORMAT",
    "Corrupt",
    "RawJSON",
    "crc32",
    "entry_bytes",
    "entry_record",
    "write_entry",
    "read_record",
    "open_arrays",
    "read_entry",
]

CACHE_FORMAT = "tokenloom-index-cache/3"

MAGIC = b"TLIDXC03"
MAX_HEADER_BYTES = 256 * 1024 * 1024
"""The longest header read: a blend of many thousands of datasets stays far below."""
_PREFIX = struct.Struct("<8sQII")
_ALIGN = 64
_CRC_STEP = 1 << 26  # bytes hashed at a time
_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps(value, separators=...)


class Corrupt(Exception):
    """A cache file that does not hold what it says it holds."""


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def crc32(array: numpy.ndarray) -> int:
    """CRC32 of an array's bytes (C order)."""
    if isinstance(array, numpy.ndarray) and array.flags.c_contiguous and array.nbytes < _CRC_STEP:
        # its buffer is its bytes in C order: no view, no copy (numpy is no typed Buffer)
        return zlib.crc32(array)  # type: ignore[arg-type]
    flat = numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8)
    crc = 0
    for start in range(0, flat.size, _CRC_STEP):
        crc = zlib.crc32(flat[start : start + _CRC_STEP].data, crc)
    return crc


def write_entry(
    path: str, record: OrderedDict[str, object], arrays: Mapping[str, numpy.ndarray]
) -> None:
    """Write ``record`` (the header, completed with the arrays' metadata and the file
    size) and ``arrays`` to ``path`` atomically (not fsynced: a cache is rebuildable and
    validated on every read)."""
    with atomic_open(path, "wb", durable=False) as handle:
        for chunk in entry_chunks(record, arrays):
            handle.write(chunk)


def entry_bytes(record: OrderedDict[str, object], arrays: Mapping[str, numpy.ndarray]) -> bytes:
    """The bytes :func:`write_entry` writes (a small entry queued for a pack file)."""
    # bytes-like pieces (numpy is no typed Buffer): one copy, no more
    return b"".join(entry_chunks(record, arrays))  # type: ignore[arg-type]


def entry_record(key: CacheKey, checks: Optional[Mapping[str, object]]) -> OrderedDict[str, object]:
    """The header of the entry of ``key`` (the arrays' metadata is added on writing)."""
    return OrderedDict(
        [
            ("format", CACHE_FORMAT),
            ("class", key.class_name),
            ("split", key.split_name),
            ("hash", key.hash),
            ("description", RawJSON(key.description)),
            ("checks", dict(checks or {})),
        ]
    )


def entry_chunks(
    record: OrderedDict[str, object], arrays: Mapping[str, numpy.ndarray]
) -> list[Union[bytes, numpy.ndarray]]:
    """The bytes-like pieces of an entry file, in order: prefix, header, padding,
    arrays (C-contiguous, each a buffer of its bytes)."""
    contiguous = [(name, _contiguous(array)) for name, array in arrays.items()]
    meta: list[str] = []
    offsets: list[int] = []
    end = 0
    for name, array in contiguous:
        nbytes = array.nbytes
        offset = -(-end // _ALIGN) * _ALIGN if nbytes else 0
        # the JSON of {"dtype", "shape", "nbytes", "crc32", "offset"}, written directly
        meta.append(
            f'{encode_basestring_ascii(name)}:{{"dtype":'
            f'{encode_basestring_ascii(array.dtype.str)},"shape":[{",".join(map(str, array.shape))}],'
            f'"nbytes":{nbytes},"crc32":{crc32(array)},"offset":{offset}}}'
        )
        offsets.append(offset)
        end = max(end, offset + nbytes)
    # no padding after the last array ("data_bytes"): every byte is checked
    header = _encode(record, (("arrays", RawJSON("{" + ",".join(meta) + "}")), ("data_bytes", end)))
    start = _aligned(_PREFIX.size + len(header))
    chunks: list[Union[bytes, numpy.ndarray]] = [
        _PREFIX.pack(MAGIC, len(header), zlib.crc32(header), 0),
        header,
        bytes(start - _PREFIX.size - len(header)),
    ]
    written = 0
    for offset, (_, array) in zip(offsets, contiguous):
        if not array.nbytes:
            continue
        chunks.append(bytes(offset - written))
        chunks.append(array)  # C-contiguous: its buffer is its bytes
        written = offset + int(array.nbytes)
    return chunks


def _contiguous(array: numpy.ndarray) -> numpy.ndarray:
    """``numpy.ascontiguousarray(array)`` (at least one dimension), without its call
    when ``array`` is one already."""
    if type(array) is numpy.ndarray and array.ndim and array.flags.c_contiguous:
        return array
    return numpy.ascontiguousarray(array)


class RawJSON(str):
    """A value of a record that is JSON text already (spliced into the header as is)."""


def _encode(record: Mapping[str, object], tail: tuple[tuple[str, object], ...] = ()) -> bytes:
    """Compact JSON of ``record`` followed by the items ``tail`` (which replace those of
    the same names in place), :class:`RawJSON` values last and spliced in unencoded (a
    cache key's description is JSON text already)."""
    plain: list[str] = []
    raw: list[str] = []
    try:
        for items in (record.items(), tail):
            for name, value in items:
                if type(value) is str:
                    plain.append(
                        f"{encode_basestring_ascii(name)}:{encode_basestring_ascii(value)}"
                    )
                elif isinstance(value, RawJSON):
                    raw.append(f"{encode_basestring_ascii(name)}:{value}")
                else:
                    plain.append(f"{encode_basestring_ascii(name)}:{_json(value)}")
    except TypeError:  # a name that is not a string: json.dumps's rules for keys
        plain = []
    if not plain or any(name in record for name, _ in tail):
        full = OrderedDict(record)
        full.update(tail)
        return _encode_general(full)
    return ("{" + ",".join(plain + raw) + "}").encode("utf-8")


def _json(value: object) -> str:
    """``json.dumps(value, separators=(",", ":"))``, its common cases without the encoder."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)  # type: ignore[arg-type]
    if kind is int:
        return int.__repr__(value)
    if kind is dict and all(type(name) is str for name in value):  # type: ignore[attr-defined]
        items = value.items()  # type: ignore[attr-defined]
        return "{" + ",".join(f"{encode_basestring_ascii(n)}:{_json(v)}" for n, v in items) + "}"
    return _COMPACT.encode(value)


def _encode_general(record: Mapping[str, object]) -> bytes:
    """:func:`_encode` of a record with non-string keys, through :mod:`json`."""
    plain = {name: value for name, value in record.items() if not isinstance(value, RawJSON)}
    text = _COMPACT.encode(plain)
    raw = "".join(
        f",{json.dumps(name)}:{value}"
        for name, value in record.items()
        if isinstance(value, RawJSON)
    )
    if raw and text == "{}":
        return ("{" + raw[1:] + "}").encode("utf-8")
    return (text[:-1] + raw + "}").encode("utf-8")


def read_record(
    handle: IO[bytes], path: str, size: Optional[int] = None
) -> tuple[dict[str, object], int]:
    """``(header, data start)`` of the open cache file ``handle`` (of ``size`` bytes, by
    default its ``fstat`` size); Corrupt when the magic, header length or header CRC is
    wrong or the size disagrees."""
    prefix = handle.read(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise Corrupt(f"{path}: {len(prefix)} bytes, too short for a cache file header")
    magic, length, crc, _ = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise Corrupt(f"{path}: not a tokenloom index cache file (magic {magic!r})")
    if size is None:
        size = os.fstat(handle.fileno()).st_size
    if length > size:
        raise Corrupt(f"{path}: header length {length} exceeds the file size {size}")
    if length > MAX_HEADER_BYTES:
        raise Corrupt(f"{path}: header length {length} exceeds the limit {MAX_HEADER_BYTES}")
    header = handle.read(length)
    if len(header) != length or zlib.crc32(header) != crc:
        raise Corrupt(f"{path}: the header fails its CRC32 (truncated or edited)")
    try:
        # bounded in depth: a crafted header with a valid CRC is damaged, not a crash
        record = loads_json(header, source=path, what="index cache entry header")
        start = _aligned(_PREFIX.size + length)
        expected = start + int(record["data_bytes"])
        if not isinstance(record, dict):
            raise TypeError("the header is not a mapping")
    except (ValueError, KeyError, TypeError) as error:
        raise Corrupt(f"{path}: malformed header ({error!r})") from None
    if size != expected:
        raise Corrupt(f"{path}: {size} bytes, expected {expected} (truncated?)")
    return record, start


def _recorded(
    path: str, name: str, meta: object, data_bytes: int
) -> tuple[numpy.dtype, tuple[int, ...], int, int, int]:
    """(dtype, shape, nbytes, crc32, offset) recorded for array ``name``, checked for
    consistency (shape times itemsize is nbytes, the extent lies inside the data)."""
    try:
        if not isinstance(meta, dict):
            raise TypeError(f"{meta!r} is not a mapping")
        dtype = numpy.dtype(meta["dtype"])
        shape = tuple(int(n) for n in meta["shape"])
        nbytes, crc, offset = int(meta["nbytes"]), int(meta["crc32"]), int(meta["offset"])
    except (KeyError, TypeError, ValueError) as error:
        raise Corrupt(f"{path}: the entry of array {name!r} is malformed ({error!r})") from None
    count = int(numpy.prod(shape, dtype=numpy.int64))
    if (
        dtype.hasobject
        or min(shape, default=0) < 0
        or count * dtype.itemsize != nbytes
        or offset < 0
        or offset % _ALIGN
        or offset + nbytes > data_bytes
    ):
        raise Corrupt(
            f"{path}: array {name!r} is recorded as {dtype}{shape} ({nbytes} bytes at "
            f"{offset}), which does not fit the file"
        )
    return dtype, shape, nbytes, crc, offset


def open_arrays(
    handle: IO[bytes],
    path: str,
    record: Mapping[str, object],
    start: int,
    names: list[str],
    mmap: bool,
    verify: str,
    buffer: Optional[bytes] = None,
) -> dict[str, numpy.ndarray]:
    """The arrays ``names`` of the open cache file (memory-mapped, or read); with
    ``buffer`` (the whole entry, in memory) views of it."""
    recorded = record.get("arrays")
    if not isinstance(recorded, dict):
        raise Corrupt(f"{path}: malformed header ('arrays' is not a mapping)")
    data_bytes = int(record["data_bytes"])  # type: ignore[call-overload]
    arrays: dict[str, numpy.ndarray] = {}
    mapped: object = buffer
    mmap = mmap or buffer is not None
    for name in names:
        if name not in recorded:
            raise Corrupt(f"{path}: no array {name!r} in the file")
        dtype, shape, nbytes, crc, offset = _recorded(path, name, recorded[name], data_bytes)
        if nbytes == 0:
            array = numpy.zeros(shape, dtype=dtype)
        elif mmap:
            if mapped is None:
                mapped = map_or_read(handle, start + data_bytes)
            array = numpy.frombuffer(
                mapped,
                dtype=dtype,
                count=nbytes // dtype.itemsize,  # type: ignore[call-overload]
                offset=start + offset,
            ).reshape(shape)
        else:
            array = numpy.empty(shape, dtype=dtype)
            handle.seek(start + offset)
            if handle.readinto(array.reshape(-1).view(numpy.uint8)) != nbytes:  # type: ignore[attr-defined]
                raise Corrupt(f"{path}: array {name!r} is cut short")
        if verify == "checksum" and crc32(array) != crc:
            raise Corrupt(f"{path}: array {name!r} fails its CRC32, the file is corrupt")
        arrays[name] = array
    return arrays


def read_entry(
    handle: IO[bytes],
    path: str,
    key: CacheKey,
    names: Iterable[str],
    mmap: bool,
    verify: str,
    checks: Optional[Mapping[str, object]],
    data: Optional[bytes] = None,
) -> Optional[dict[str, numpy.ndarray]]:
    """The arrays of the entry open as ``handle`` (``data``: its bytes, already in
    memory), or None when its ``checks`` differ; Corrupt when it is damaged or does
    not belong to ``key``."""
    record, start = read_record(handle, path, size=None if data is None else len(data))
    _check_record(path, record, key)
    if not _checks_agree(record.get("checks"), checks):
        return None
    return open_arrays(handle, path, record, start, list(names), mmap, verify, buffer=data)


def _check_record(path: str, record: Mapping[str, object], key: CacheKey) -> None:
    """The header must be this format's and its description must hash to the key."""
    if record.get("format") != CACHE_FORMAT:
        raise Corrupt(f"{path}: not a {CACHE_FORMAT} cache file")
    description = record.get("description")
    if (
        record.get("hash") != key.hash
        or not isinstance(description, dict)
        or description_hash(describe(description)) != key.hash
    ):
        raise Corrupt(f"{path}: the description does not match the cache key")


def _checks_agree(stored: object, wanted: Optional[Mapping[str, object]]) -> bool:
    if not wanted:
        return True
    if not isinstance(stored, dict):
        stored = {}
    return all(k in stored and stored[k] == v for k, v in wanted.items())
