"""Split strings, split matrices and split document ranges (megatron-core arithmetic)."""

from __future__ import annotations

import pytest

from tokenloom.datasets import (
    Split,
    convert_split_vector_to_split_matrix,
    parse_and_normalize_split,
    split_document_range,
)
from tokenloom.errors import ConfigError


def test_split_enum_values():
    assert [(s.name, s.value) for s in Split] == [("train", 0), ("valid", 1), ("test", 2)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("98,2,0", [0.98, 0.02, 0.0]),
        ("99,1", [0.99, 0.01, 0.0]),
        ("1", [1.0, 0.0, 0.0]),
        (" 1, 1 ,2 ", [0.25, 0.25, 0.5]),
        ("0.5,0.5", [0.5, 0.5, 0.0]),
        ("949/50/1", [0.949, 0.05, 0.001]),
    ],
)
def test_parse_and_normalize_split(text, expected):
    assert parse_and_normalize_split(text) == pytest.approx(expected, abs=0, rel=1e-15)


@pytest.mark.parametrize(
    "text, message",
    [
        ("98,-2,0", "non-negative"),
        ("a,b,c", "non-negative"),
        ("", "non-negative"),
        ("1,2,3,4", "at most 3"),
        ("0,0,0", "sum to zero"),
        ("1..2", "non-negative"),
    ],
)
def test_bad_split_strings(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_and_normalize_split(text)


def test_split_must_be_a_string():
    with pytest.raises(ConfigError, match="string"):
        parse_and_normalize_split([98, 2, 0])


def test_split_matrix_examples():
    assert convert_split_vector_to_split_matrix([0.99, 0.01, 0.0]) == [(0, 0.99), (0.99, 1.0), None]
    assert convert_split_vector_to_split_matrix([0.99, 0.01, 0.0], [0.98, 0.02, 0.0]) == [
        (0, 0.98),
        (0.99, 1.0),
        None,
    ]


def test_split_matrix_float_accumulation_is_megatrons():
    # 0.1 + 0.2 != 0.3 in floats: the bookends must carry the same rounding
    matrix = convert_split_vector_to_split_matrix([0.1, 0.2, 0.7])
    assert matrix[1] == (0.1, 0.1 + 0.2) and matrix[2] == (0.1 + 0.2, 0.1 + 0.2 + 0.7)


def test_split_matrix_length_mismatch():
    with pytest.raises(ConfigError, match="differ in length"):
        convert_split_vector_to_split_matrix([0.5, 0.5], [1.0, 0.0, 0.0])


def test_split_document_range_rounds_like_the_builder():
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split("949,50,1"))
    assert [split_document_range(m, 300) for m in matrix] == [(0, 285), (285, 300), (300, 300)]
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split("98,2,0"))
    assert split_document_range(matrix[0], 300) == (0, 294)
    assert split_document_range(matrix[1], 300) == (294, 300)
