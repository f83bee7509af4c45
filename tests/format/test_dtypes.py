"""DType codes, sizes and the optimal dtype rule (Megatron's values)."""

from __future__ import annotations

import numpy
import pytest

from tokenloom.errors import FormatError
from tokenloom.format import DType, optimal_dtype

CODES = {
    numpy.uint8: 1,
    numpy.int8: 2,
    numpy.int16: 3,
    numpy.int32: 4,
    numpy.int64: 5,
    numpy.float64: 6,
    numpy.float32: 7,
    numpy.uint16: 8,
}


@pytest.mark.parametrize("dtype, code", list(CODES.items()))
def test_codes_and_sizes(dtype, code):
    assert DType.code_from_dtype(dtype) == code
    assert DType.code_from_dtype(numpy.dtype(dtype)) == code
    assert DType.dtype_from_code(code) is dtype
    assert DType.size(code) == DType.size(dtype) == numpy.dtype(dtype).itemsize


def test_unknown_codes_and_dtypes():
    with pytest.raises(FormatError, match="unknown dtype code 9"):
        DType.dtype_from_code(9)
    with pytest.raises(FormatError, match="uint32"):
        DType.code_from_dtype(numpy.uint32)
    with pytest.raises(FormatError):
        DType.size("not a dtype")


@pytest.mark.parametrize(
    "vocab, expected",
    [
        (None, numpy.int32),
        (0, numpy.uint16),
        (65499, numpy.uint16),
        (65500, numpy.int32),
        (32000, numpy.uint16),
        (128256, numpy.int32),
    ],
)
def test_optimal_dtype(vocab, expected):
    assert optimal_dtype(vocab) is expected
    assert DType.optimal_dtype(vocab) is expected
