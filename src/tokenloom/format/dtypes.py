"""Token dtypes of the MMIDIDX format and their one-byte codes in the ``.idx`` header."""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional, Union, cast

import numpy

from tokenloom.errors import FormatError

_VOCAB_LIMIT_UINT16 = 65500


class DType(Enum):
    """The numpy token dtypes a ``.bin`` file may hold, keyed by their header code.

    The codes are Megatron's: uint8=1, int8=2, int16=3, int32=4, int64=5,
    float64=6, float32=7, uint16=8.
    """

    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @classmethod
    def code_from_dtype(cls, value: Any) -> int:
        """Return the header code of a numpy dtype (type, ``numpy.dtype`` or name)."""
        try:
            dtype = numpy.dtype(value)
            code = _CODES.get(dtype) if dtype.isnative else None  # (a byte-swapped one: by name)
            return code if code is not None else int(cls[dtype.name].value)
        except (KeyError, TypeError) as error:
            known = ", ".join(member.name for member in cls)
            raise FormatError(
                f"dtype {value!r} cannot be stored in an MMIDIDX file; use one of: {known}"
            ) from error

    @classmethod
    def dtype_from_code(cls, value: int) -> type[numpy.number[Any]]:
        """Return the numpy scalar type for a header code (FormatError when unknown)."""
        try:
            return cast("type[numpy.number[Any]]", getattr(numpy, cls(int(value)).name))
        except (ValueError, TypeError) as error:
            known = ", ".join(f"{member.value}={member.name}" for member in cls)
            raise FormatError(f"unknown dtype code {value!r}; known codes: {known}") from error

    @staticmethod
    def size(key: Union[int, type[numpy.number[Any]], numpy.dtype[Any]]) -> int:
        """Return the size in bytes of one token, given a header code or a numpy dtype."""
        if isinstance(key, (int, numpy.integer)) and not isinstance(key, bool):
            return numpy.dtype(DType.dtype_from_code(int(key))).itemsize
        try:
            return int(numpy.dtype(cast(Any, key)).itemsize)
        except TypeError as error:
            raise FormatError(f"{key!r} is neither a dtype code nor a numpy dtype") from error

    @staticmethod
    def optimal_dtype(cardinality: Optional[int]) -> type[numpy.number[Any]]:
        """Return the smallest token dtype for a vocabulary of ``cardinality`` ids.

        ``numpy.uint16`` below 65500 ids, ``numpy.int32`` otherwise or when unknown
        (the same rule as Megatron, so files come out identical).
        """
        if cardinality is not None and cardinality < _VOCAB_LIMIT_UINT16:
            return numpy.uint16
        return numpy.int32


def optimal_dtype(vocab_size: Optional[int]) -> type[numpy.number[Any]]:
    """Return ``numpy.uint16`` if ``vocab_size < 65500`` else ``numpy.int32``."""
    return DType.optimal_dtype(vocab_size)


def normalize_dtype(dtype: Any) -> type[numpy.number[Any]]:
    """Return the numpy scalar type of ``dtype`` after checking the format supports it."""
    code = DType.code_from_dtype(dtype)
    return DType.dtype_from_code(code)


__all__ = ["DType", "optimal_dtype", "normalize_dtype"]


_CODES: dict[numpy.dtype[Any], int] = {numpy.dtype(m.name): int(m.value) for m in DType}
"""The header code of each native numpy dtype (what :meth:`DType.code_from_dtype` gives)."""
