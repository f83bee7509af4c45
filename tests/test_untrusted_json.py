"""tokenloom.untrusted_json: the one bounded reader of JSON found on disk.

Whatever the bytes, the reader returns a value or raises UntrustedFileError naming the
file, what it is and the limit broken: never RecursionError, MemoryError, a hang on a
FIFO or an unbounded read of /dev/zero.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenloom.errors import TokenloomError, UntrustedFileError
from tokenloom.untrusted_json import (
    DEFAULT_MAX_DEPTH,
    loads_json,
    nesting_depth,
    read_bounded,
    read_json_file,
)


def _depth_of(value: object) -> int:
    """The nesting of a parsed value, measured without recursion (the test's oracle)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def test_plain_values_round_trip(tmp_path):
    value = {"a": [1, 2.5, None, True, {"b": 'x[y{z"\\'}], "é": "\u005b"}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    assert read_json_file(path, what="test file") == value
    assert loads_json(json.dumps(value).encode(), source="mem") == value
    assert loads_json(json.dumps(value), source="mem") == value


def test_object_pairs_hook_is_passed_on():
    from collections import OrderedDict

    value = loads_json('{"b": 1, "a": 2}', source="mem", object_pairs_hook=OrderedDict)
    assert isinstance(value, OrderedDict) and list(value) == ["b", "a"]


def test_error_names_file_kind_and_limit_and_is_a_value_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(UntrustedFileError) as caught:
        read_json_file(path, what="provenance sidecar", hint="rebuild it")
    message = str(caught.value)
    assert str(path) in message and "provenance sidecar" in message
    assert f"limit of {DEFAULT_MAX_DEPTH}" in message and message.endswith("rebuild it")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TokenloomError)
    assert (caught.value.path, caught.value.what) == (str(path), "provenance sidecar")
    copy = pickle.loads(pickle.dumps(caught.value))  # crosses process pools intact
    assert str(copy) == message and copy.path == str(path)


@pytest.mark.parametrize("opener,closer", [("[", "]"), ('{"k":', "}")])
def test_depth_limit_is_exact(opener, closer):
    at_limit = opener * 5 + "1" + closer * 5
    assert _depth_of(loads_json(at_limit, source="m", max_depth=5)) == 5
    with pytest.raises(UntrustedFileError, match="nests 6 levels deep"):
        loads_json(opener * 6 + "1" + closer * 6, source="m", max_depth=5)


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, "[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "0" + "}" * 50_000],
)
def test_deep_nesting_is_refused_not_a_recursion_error(text):
    for data in (text, text.encode()):
        with pytest.raises(UntrustedFileError, match="levels deep"):
            loads_json(data, source="m")


def test_brackets_inside_strings_do_not_count():
    text = json.dumps(["[" * 1000, "{" * 1000, '\\"[[[', "\\", '"]]]'])
    assert nesting_depth(text) == 1
    assert loads_json(text, source="m", max_depth=1)[0] == "[" * 1000


def test_a_result_at_the_default_limit_survives_dumps_and_repr_on_a_busy_stack():
    value = loads_json("[" * DEFAULT_MAX_DEPTH + "]" * DEFAULT_MAX_DEPTH, source="m")

    def nested(levels: int) -> None:  # a caller already 600 frames deep
        if levels:
            return nested(levels - 1)
        json.dumps(value)
        repr(value)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        nested(600)
    finally:
        sys.setrecursionlimit(limit)


def test_size_limit_counts_bytes_read_not_stat(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps("x" * 100))
    assert read_json_file(path, what="t", max_bytes=102) == "x" * 100
    with pytest.raises(UntrustedFileError, match="larger than the limit of 101 bytes"):
        read_json_file(path, what="t", max_bytes=101)
    with pytest.raises(UntrustedFileError, match="larger than the limit"):
        loads_json(b"1" * 11, source="m", max_bytes=10)


@pytest.mark.timeout(30)
def test_dev_zero_symlink_is_refused_without_reading_it(tmp_path):
    link = tmp_path / "sidecar.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(UntrustedFileError, match="not a regular file") as caught:
        read_json_file(link, what="provenance sidecar")
    assert str(link) in str(caught.value)
    # a stream the caller allows is still read bounded
    with pytest.raises(UntrustedFileError, match="larger than the limit of 4096 bytes"):
        read_bounded(link, what="config", max_bytes=4096, allow_stream=True)


@pytest.mark.timeout(30)
def test_fifo_and_directory_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "memo.json"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_json_file(fifo, what="start-up memo")  # no writer: a plain open() would hang
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_json_file(tmp_path, what="start-up memo", allow_stream=True)


@pytest.mark.timeout(30)
def test_an_allowed_stream_is_read_to_its_end(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as handle:
            handle.write('{"seed": 3}')

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_json_file(fifo, what="--config file", allow_stream=True) == {"seed": 3}
    finally:
        writer.join(10)


@pytest.mark.timeout(60)
def test_a_writer_that_comes_while_the_kind_is_checked_is_not_lost(tmp_path):
    """The stream is read from the descriptor its kind was checked on: closing that and
    opening the FIFO again lost a write made in between and then waited for a writer
    forever (one in ~200 tries here, and a CI run hung on it)."""
    for attempt in range(200):
        fifo = tmp_path / f"config{attempt}.json"
        os.mkfifo(fifo)

        def write(path=fifo, value=attempt) -> None:
            with open(path, "w") as handle:
                handle.write(f'{{"seed": {value}}}')

        writer = threading.Thread(target=write)
        writer.start()
        try:
            got = read_json_file(fifo, what="--config file", allow_stream=True)
        finally:
            writer.join(10)
        assert got == {"seed": attempt}


def test_missing_file_keeps_its_own_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_json_file(tmp_path / "absent.json", what="t")


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe\xfa", b'{"a": "\xc3"}', b"", b"{", b'{"a": 1,}', b"1" * 5000, b"[1] [2]", b"NaN]"],
)
def test_garbage_raises_the_one_error(data):
    with pytest.raises(UntrustedFileError):
        loads_json(data, source="m")


def _json_values(max_leaves: int = 30) -> st.SearchStrategy:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values())
def test_depth_matches_the_parsed_value(value):
    text = json.dumps(value)
    assert nesting_depth(text) == _depth_of(value)
    assert nesting_depth(text.encode()) == _depth_of(value)
    assert loads_json(text, source="m") == json.loads(text)


def _mutated(data: st.DataObject) -> bytes:
    value = data.draw(_json_values(), label="value")
    raw = json.dumps(value, ensure_ascii=data.draw(st.booleans())).encode()
    kind = data.draw(st.sampled_from(["truncate", "splice", "nest", "garbage"]))
    if kind == "truncate":
        return raw[: data.draw(st.integers(0, len(raw)))]
    if kind == "splice":
        at = data.draw(st.integers(0, len(raw)))
        return raw[:at] + data.draw(st.binary(max_size=20)) + raw[at:]
    if kind == "nest":
        levels = data.draw(st.integers(0, 3000))
        opener = data.draw(st.sampled_from(["[", '{"k":', '["\\"', "[{}"]))
        return (
            (opener * levels).encode()
            + raw
            + (data.draw(st.sampled_from(["]", "}", ""])) * levels).encode()
        )
    return data.draw(st.binary(max_size=200))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_only_a_value_or_the_one_error(data):
    raw = _mutated(data)
    max_depth = data.draw(st.integers(1, 200), label="max_depth")
    max_bytes = data.draw(st.integers(1, 100_000), label="max_bytes")
    for payload in (raw, raw.decode("utf-8", "replace")):
        try:
            value = loads_json(payload, source="fuzz", max_bytes=max_bytes, max_depth=max_depth)
        except UntrustedFileError as error:
            assert "fuzz" in str(error)
            continue
        assert _depth_of(value) <= max_depth
        json.dumps(value)  # anything returned can be walked by recursive code


def test_check_nesting_refuses_deep_self_referring_and_exploding_values():
    from tokenloom.untrusted_json import check_nesting

    check_nesting({"a": [1, {"b": None}]}, source="c.yaml", what="config", max_depth=3)
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(UntrustedFileError, match="c.yaml: nests more than 128"):
        check_nesting(deep, source="c.yaml", what="config")
    loop: list = []
    loop.append(loop)  # YAML anchors can build this
    with pytest.raises(UntrustedFileError, match="refers to itself"):
        check_nesting(loop, source="c.yaml", what="config")
    shared = ["x"] * 10
    for _ in range(8):  # a billion laughs: 10**9 values from 90 objects
        shared = [shared] * 10
    with pytest.raises(UntrustedFileError, match="more than 1000000 values"):
        check_nesting(shared, source="c.yaml", what="config")
