"""Growable numpy arrays and token conversion shared by the writer."""

from __future__ import annotations

import functools
from typing import Any, Generic, Optional, TypeVar, Union

import numpy
import numpy.typing as npt

from tokenloom.attributes import has_attribute
from tokenloom.errors import FormatError

_ScalarT = TypeVar("_ScalarT", bound=numpy.generic)


class GrowableArray(Generic[_ScalarT]):
    """An append-only 1-D numpy array with amortised O(1) append and vectorised extend."""

    def __init__(
        self, dtype: type[_ScalarT], initial: npt.ArrayLike = (), capacity: int = 1024
    ) -> None:
        initial = numpy.asarray(initial, dtype=dtype).ravel()
        self._data: npt.NDArray[_ScalarT] = numpy.empty(
            max(capacity, initial.shape[0]), dtype=dtype
        )
        self._data[: initial.shape[0]] = initial
        self._size: int = initial.shape[0]

    def __len__(self) -> int:
        return self._size

    def _reserve(self, extra: int) -> None:
        need = self._size + extra
        if need > self._data.shape[0]:
            grown = numpy.empty(max(need, 2 * self._data.shape[0]), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown

    def append(self, value: Union[int, float, numpy.generic]) -> None:
        """Append one value."""
        if self._size == self._data.shape[0]:
            self._reserve(1)
        self._data[self._size] = value
        self._size += 1

    def extend(self, values: npt.ArrayLike) -> None:
        """Append every value of a 1-D array-like."""
        values = numpy.asarray(values)
        self._reserve(values.shape[0])
        self._data[self._size : self._size + values.shape[0]] = values
        self._size += values.shape[0]

    def last(self) -> _ScalarT:
        """The last value (IndexError when empty)."""
        if not self._size:
            raise IndexError("empty")
        value: _ScalarT = self._data[self._size - 1]
        return value

    def view(self) -> npt.NDArray[_ScalarT]:
        """A view of the filled part (invalidated by the next append/extend)."""
        return self._data[: self._size]


def as_numpy(values: object) -> npt.NDArray[Any]:
    """numpy view of a numpy array, list, scalar or (duck-typed) torch tensor."""
    if (
        has_attribute(values, "detach")
        and has_attribute(values, "cpu")
        and has_attribute(values, "numpy")
    ):
        values = values.detach().cpu().numpy()
    try:
        array = numpy.asarray(values)
    except (OverflowError, ValueError, TypeError) as error:
        raise FormatError(f"cannot convert tokens to an integer array: {error}") from None
    return array.reshape(-1) if array.ndim != 1 else array


@functools.cache
def _cast_rule(source: numpy.dtype[Any], target: numpy.dtype[Any]) -> Optional[tuple[int, int]]:
    """None when every ``source`` value fits ``target``; else the (min, max) to check."""
    if source.kind not in "biuf":
        raise FormatError(f"tokens must be numbers, got an array of {source}")
    if numpy.can_cast(source, target, "safe") or target.kind == "f":
        return None
    info = numpy.iinfo(target)
    return int(info.min), int(info.max)


def check_fits(array: npt.NDArray[Any], dtype: npt.DTypeLike, where: str) -> None:
    """FormatError unless every value of ``array`` is representable in ``dtype`` unchanged."""
    target = numpy.dtype(dtype)
    try:
        bounds = _cast_rule(array.dtype, target)
    except FormatError as error:
        raise FormatError(f"{where}: {error}") from None
    if bounds is None or array.size == 0:
        return
    if array.dtype.kind == "f":
        bad = ~numpy.isfinite(array) | (array != numpy.trunc(array))
        if bad.any():
            at = int(numpy.flatnonzero(bad)[0])
            raise FormatError(f"{where}: token {array[at]!r} at position {at} is not an integer")
    low, high = bounds
    if array.min() < low or array.max() > high:
        at = int(numpy.flatnonzero((array < low) | (array > high))[0])
        raise FormatError(
            f"{where}: token {array[at].item()!r} at position {at} does not fit {target.name} "
            f"(range {low}..{high}); use a wider dtype such as numpy.int32, or check "
            "the tokenizer's vocabulary size"
        )


def to_tokens(values: object, dtype: npt.DTypeLike, where: str) -> npt.NDArray[Any]:
    """Convert ``values`` to a contiguous 1-D array of ``dtype``, refusing lossy casts."""
    array = as_numpy(values)
    if array.dtype != dtype:
        check_fits(array, dtype, where)
        array = array.astype(dtype)
    return numpy.ascontiguousarray(array)
