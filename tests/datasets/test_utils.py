"""Blend lists, per-split blend files and sequences_per_dataset files."""

from __future__ import annotations

import json

import pytest

from tokenloom.datasets import (
    get_blend_from_list,
    get_blend_per_split_from_dict,
    get_blend_per_split_from_file,
    load_sequences_per_dataset,
    normalize,
)
from tokenloom.errors import ConfigError


def test_weighted_blend_list():
    assert get_blend_from_list(["30", "path/a ", "70", "path/b"]) == (
        ["path/a", "path/b"],
        [30.0, 70.0],
    )


def test_prefix_only_blend_lists():
    assert get_blend_from_list(["a", "b"]) == (["a", "b"], None)
    assert get_blend_from_list(["a", "b", "c"]) == (["a", "b", "c"], None)
    assert get_blend_from_list(None) is None


@pytest.mark.parametrize(
    "blend, message",
    [
        ([], "empty"),
        ("a b", "expected a list"),
        (["30", "a", "b", "c"], "mixes weights and prefixes"),
    ],
)
def test_bad_blend_lists(blend, message):
    with pytest.raises(ConfigError, match=message):
        get_blend_from_list(blend)


def test_normalize():
    assert normalize([1, 3]) == [0.25, 0.75]


def test_blend_per_split_file(tmp_path):
    path = tmp_path / "blend.json"
    path.write_text(json.dumps({"train": ["30", "a", "70", "b"], "valid": "c d", "test": None}))
    assert get_blend_per_split_from_file(path) == [
        (["a", "b"], [30.0, 70.0]),
        (["c", "d"], None),
        None,
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        ({"train": ["a"], "valid": ["b"]}, "'test' is missing"),
        ({"train": ["a"], "valid": None, "test": None, "dev": ["x"]}, "unknown keys"),
        (["a"], "JSON object"),
    ],
)
def test_bad_blend_per_split(content, message):
    with pytest.raises(ConfigError, match=message):
        get_blend_per_split_from_dict(content)


def test_blend_per_split_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        get_blend_per_split_from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="as JSON"):
        get_blend_per_split_from_file(bad)


def test_sequences_per_dataset(tmp_path):
    path = tmp_path / "spd.json"
    path.write_text(json.dumps({"a": [10, 4], "b": {"sequence_count": 3, "document_count": 3}}))
    assert load_sequences_per_dataset(str(path)) == {"a": (10, 4), "b": (3, 3)}
    assert load_sequences_per_dataset({"a": (1, 1)}) == {"a": (1, 1)}


@pytest.mark.parametrize(
    "content", [{"a": [1]}, {"a": [1, -1]}, {"a": "12"}, {"a": [1.5, 2]}, [1, 2]]
)
def test_bad_sequences_per_dataset(content):
    with pytest.raises(ConfigError):
        load_sequences_per_dataset(content)
