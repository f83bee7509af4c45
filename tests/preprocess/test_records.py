"""JSONL parsing and the bad-input policies (fail with file:line, or skip and count)."""

from __future__ import annotations

import pytest

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import RawChunk
from tokenloom.preprocess.records import Policy, parse_chunk, skipped_labels

LINES = [
    b'{"text": "first", "title": "t1"}',
    b"",  # line 2: blank
    b'{"text": "second"',  # line 3: truncated JSON
    b'["not", "an", "object"]',  # line 4: JSON but not an object
    b'{"title": "no text"}',  # line 5: missing key
    b'{"text": 42, "title": "t6"}',  # line 6: not a string
    b'{"text": null, "title": "t7"}',  # line 7: not a string
    b'{"text": "caf\xff"}',  # line 8: invalid UTF-8
    b"   ",  # line 9: blank
    b'{"text": "", "title": "t10"}',  # line 10: empty string (decided after encoding)
]


def chunk(lines=LINES, first_line=1) -> RawChunk:
    data = b"\n".join(lines) + b"\n"
    return RawChunk("/data/x.jsonl", first_line, data, len(data))


SKIP_ALL = Policy(on_bad_json="skip", on_missing_key="skip", on_bad_type="skip")


def test_skip_everything_counts_every_reason():
    parsed = parse_chunk(chunk(), ["text"], SKIP_ALL)
    assert parsed.texts["text"] == ["first", ""]
    assert parsed.lines["text"] == [1, 10]
    assert parsed.line_count == 10 and parsed.blank_lines == 2
    assert dict(parsed.skipped) == {
        ("bad_json", ""): 3,
        ("missing_key", "text"): 1,
        ("bad_type", "text"): 2,
    }
    assert skipped_labels(parsed.skipped) == [
        ("malformed JSON lines", 3),
        ("record without key 'text'", 1),
        ("non-string values of 'text'", 2),
    ]


def test_several_keys_skip_only_the_missing_key():
    parsed = parse_chunk(chunk(), ["text", "title"], SKIP_ALL)
    assert parsed.texts["title"] == ["t1", "no text", "t6", "t7", "t10"]
    assert parsed.lines["title"] == [1, 5, 6, 7, 10]
    # line 5 lacks "text": only its "text" document is skipped, its "title" is kept
    assert parsed.texts["text"] == ["first", ""]
    assert parsed.skipped[("missing_key", "text")] == 1
    assert ("missing_key", "title") not in parsed.skipped


@pytest.mark.parametrize(
    "policy, line, message",
    [
        (
            Policy(),
            3,
            r"x.jsonl:3: malformed JSON \(Expecting ',' delimiter at column 18\).*"
            r"--on-bad-json skip",
        ),
        (
            Policy(on_bad_json="skip"),
            5,
            r"x.jsonl:5: JSON key 'text' is missing \(the object has keys:"
            r" 'title'\).*--on-missing-key skip",
        ),
        (
            Policy(on_bad_json="skip", on_missing_key="skip"),
            6,
            r"x.jsonl:6: key 'text' holds int 42, not a string.*--on-bad-type skip",
        ),
    ],
)
def test_fail_names_file_line_and_the_option(policy, line, message):
    with pytest.raises(PreprocessError, match=message):
        parse_chunk(chunk(), ["text"], policy)


def test_not_an_object_and_bad_utf8_are_bad_json():
    with pytest.raises(PreprocessError, match=r"x.jsonl:4: expected a JSON object, got list"):
        parse_chunk(chunk(LINES[3:4], first_line=4), ["text"], Policy())
    with pytest.raises(PreprocessError, match=r"x.jsonl:8: malformed JSON \(.*utf-8"):
        parse_chunk(chunk(LINES[7:8], first_line=8), ["text"], Policy())


def test_line_numbers_continue_across_chunks():
    with pytest.raises(PreprocessError, match=r"x.jsonl:1003: malformed JSON"):
        parse_chunk(chunk(LINES[:3], first_line=1001), ["text"], Policy())


@pytest.mark.parametrize(
    "kwargs", [{"on_bad_json": "ignore"}, {"on_empty": "skipp"}, {"on_missing_key": "keep"}]
)
def test_policy_values_are_checked(kwargs):
    with pytest.raises(PreprocessError, match="choose one of"):
        Policy(**kwargs)
