"""The bytes of an index-cache entry (issue 22 §5): the lean ``entry_chunks`` /
``entry_bytes`` / ``_encode`` / ``crc32`` write exactly the bytes of their readable
reference twin below (the implementation they replaced), for arrays of every byte
order, layout and dimension (empty, 0-d, non-contiguous, unaligned, numpy scalars,
lists) and for records of any JSON content."""

from __future__ import annotations

import io
import json
import struct
import zlib
from collections import OrderedDict
from json.encoder import encode_basestring_ascii

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tokenloom.cache import entry
from tokenloom.cache.entry import RawJSON


# -- the reference twin: the entry writer as it was, written for reading ---------------
def reference_crc32(array):
    flat = numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8)
    crc = 0
    for start in range(0, flat.size, 1 << 26):
        crc = zlib.crc32(flat[start : start + (1 << 26)].data, crc)
    return crc


def reference_encode(record):
    plain = {name: value for name, value in record.items() if not isinstance(value, RawJSON)}
    text = json.dumps(plain, separators=(",", ":"))
    raw = "".join(
        f",{json.dumps(name)}:{value}"
        for name, value in record.items()
        if isinstance(value, RawJSON)
    )
    if raw and text == "{}":
        return ("{" + raw[1:] + "}").encode("utf-8")
    return (text[:-1] + raw + "}").encode("utf-8")


def reference_bytes(record, arrays):
    aligned = lambda offset: -(-offset // 64) * 64  # noqa: E731
    contiguous = {name: numpy.ascontiguousarray(array) for name, array in arrays.items()}
    meta, offsets, end = [], [], 0
    for name, array in contiguous.items():
        nbytes = int(array.nbytes)
        offset = aligned(end) if nbytes else 0
        shape = ",".join(str(int(n)) for n in array.shape)
        meta.append(
            f'{encode_basestring_ascii(name)}:{{"dtype":'
            f'{encode_basestring_ascii(array.dtype.str)},"shape":[{shape}],'
            f'"nbytes":{nbytes},"crc32":{reference_crc32(array)},"offset":{offset}}}'
        )
        offsets.append(offset)
        end = max(end, offset + nbytes)
    record = OrderedDict(record)
    record["arrays"] = RawJSON("{" + ",".join(meta) + "}")
    record["data_bytes"] = end
    header = reference_encode(record)
    start = aligned(24 + len(header))
    out = [struct.pack("<8sQII", b"TLIDXC03", len(header), zlib.crc32(header), 0), header]
    out.append(bytes(start - 24 - len(header)))
    written = 0
    for offset, array in zip(offsets, contiguous.values()):
        if array.nbytes:
            out.append(bytes(offset - written))
            out.append(array.reshape(-1).view(numpy.uint8).tobytes())
            written = offset + int(array.nbytes)
    return b"".join(out)


# -- strategies ---------------------------------------------------------------------
DTYPES = st.one_of(
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?"),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.boolean_dtypes(),
    hnp.datetime64_dtypes(endianness="?"),
)


@st.composite
def any_array(draw):
    array = draw(
        hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
    )
    how = draw(st.sampled_from(["as is", "transposed", "strided", "fortran", "unaligned",
                                "read-only", "scalar", "list"]))  # fmt: skip
    if how == "transposed":
        return array.T
    if how == "strided" and array.ndim:
        return array[::2]
    if how == "fortran":
        return numpy.asfortranarray(array)
    if how == "unaligned" and array.dtype.itemsize > 1:
        raw = numpy.zeros(array.nbytes + 1, numpy.uint8)[1:]
        moved = raw.view(array.dtype).reshape(array.shape)
        moved[...] = array
        return moved
    if how == "read-only":
        array.flags.writeable = False
    if how == "scalar":  # a numpy scalar, not an array
        return numpy.zeros((), array.dtype)[()]
    if how == "list":
        return [int(n) for n in range(draw(st.integers(0, 5)))]
    return array


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
VALUES = JSON_VALUES | TEXT.map(lambda text: RawJSON(json.dumps(text)))
NAMES = TEXT | st.sampled_from(["arrays", "data_bytes", "checks", "description"])
RECORDS = st.lists(st.tuples(NAMES, VALUES), max_size=7).map(OrderedDict)


# -- the tests ----------------------------------------------------------------------
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays=st.dictionaries(TEXT, any_array(), max_size=4), record=RECORDS)
def test_entry_bytes_are_the_reference_bytes(arrays, record):
    expected = reference_bytes(record, arrays)
    assert entry.entry_bytes(record, arrays) == expected
    written = io.BytesIO()  # the chunks as write_entry writes them
    for chunk in entry.entry_chunks(record, arrays):
        written.write(chunk)
    assert written.getvalue() == expected


@settings(max_examples=300, deadline=None)
@given(array=any_array())
def test_crc32_is_the_reference_crc32(array):
    assert entry.crc32(numpy.asarray(array)) == reference_crc32(array)


@settings(max_examples=300, deadline=None)
@given(record=RECORDS | st.lists(st.tuples(st.integers(-3, 3) | NAMES, VALUES)).map(OrderedDict))
def test_encode_is_the_reference_encode(record):
    try:
        expected = reference_encode(record)
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)):
            entry._encode(record)
        return
    assert entry._encode(record) == expected


def test_an_array_past_one_crc_step_is_hashed_in_steps(tmp_path):
    array = numpy.arange((1 << 26) + 12, dtype=numpy.uint8)
    assert entry.crc32(array) == reference_crc32(array) == zlib.crc32(array.tobytes())
    record = OrderedDict([("format", entry.CACHE_FORMAT)])
    entry.write_entry(str(tmp_path / "big"), record, {"a": array, "b": array[::-1]})
    expected = reference_bytes(record, {"a": array, "b": array[::-1]})
    assert (tmp_path / "big").read_bytes() == expected
