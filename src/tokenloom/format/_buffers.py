"""Growable numpy arrays and token conversion shared by the writer."""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Generic, Optional, TypeVar, Union

import numpy
import numpy.typing as npt

from tokenloom.attributes import has_attribute
from tokenloom.errors import FormatError
from tokenloom.process_caches import CAST_RULES

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
        tensor: Any = values
        try:
            values = tensor.detach().cpu().numpy()
        except (TypeError, RuntimeError) as error:  # bfloat16 and other types numpy lacks
            raise FormatError(f"cannot convert the tensor to a numpy array: {error}") from None
    try:
        array = numpy.asarray(values)
    except (OverflowError, ValueError, TypeError) as error:
        raise FormatError(f"cannot convert tokens to an integer array: {error}") from None
    return array.reshape(-1) if array.ndim != 1 else array


def _cast_rule(source: numpy.dtype[Any], target: numpy.dtype[Any]) -> Optional[tuple[int, int]]:
    """None when every ``source`` value fits ``target``; else the (min, max) to check
    (remembered in ``process_caches.CAST_RULES``)."""
    known = CAST_RULES.get((source, target))
    if known is None:
        known = CAST_RULES.put((source, target), (_new_cast_rule(source, target),))
    return known[0]


def _new_cast_rule(source: numpy.dtype[Any], target: numpy.dtype[Any]) -> Optional[tuple[int, int]]:
    if source.kind not in "biuf":
        raise FormatError(f"tokens must be numbers, got an array of {source}")
    if numpy.can_cast(source, target, "safe") or target.kind == "f":
        return None
    info = numpy.iinfo(target)
    return int(info.min), int(info.max)


def _range_error(where: str, item: str, value: object, at: int, target: numpy.dtype[Any]) -> str:
    info = numpy.iinfo(target)
    return (
        f"{where}: {item} {value!r} at position {at} does not fit {target.name} "
        f"(range {int(info.min)}..{int(info.max)}); use a wider dtype such as numpy.int32, "
        "or check the tokenizer's vocabulary size"
    )


def check_fits(
    array: npt.NDArray[Any], dtype: npt.DTypeLike, where: str, item: str = "token"
) -> None:
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
            raise FormatError(
                f"{where}: {item} {array[at].item()!r} at position {at} is not an integer"
            )
    low, high = bounds
    if array.min() < low or array.max() > high:
        at = int(numpy.flatnonzero((array < low) | (array > high))[0])
        raise FormatError(_range_error(where, item, array[at].item(), at, target))


def _python_integer(value: object, where: str, item: str, at: int) -> int:
    """One element of a text or object array as a Python int, as ``numpy.array(values,
    dtype=<integer>)`` reads it (``int()`` of a number string), but refusing what numpy
    would truncate (``1.5``, ``nan``)."""
    if isinstance(value, (str, bytes)):
        try:
            return int(value)
        except ValueError:
            raise FormatError(
                f"{where}: {item} {value!r} at position {at} is not an integer "
                "(number strings must be whole numbers, such as '42')"
            ) from None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number) and number == math.trunc(number):
            return int(number)
        raise FormatError(f"{where}: {item} {value!r} at position {at} is not an integer")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise FormatError(
            f"{where}: {item} {value!r} at position {at} is not a number; give token ids as "
            "integers, number strings or an integer array"
        ) from None


def _elements(values: object, array: npt.NDArray[Any], where: str) -> npt.NDArray[Any]:
    """The elements as given: ``numpy.asarray`` turned a list mixing numbers and strings
    into strings (``[1.0, "2"]`` -> ``["1.0", "2"]``), which ``int()`` would then refuse;
    an object array keeps ``1.0`` a float."""
    if isinstance(values, numpy.ndarray):
        return array
    try:
        return numpy.array(values, dtype=object).reshape(-1)
    except (ValueError, TypeError) as error:
        raise FormatError(f"{where}: cannot convert tokens to an integer array: {error}") from None


def _parse_integers(
    array: npt.NDArray[Any], dtype: numpy.dtype[Any], where: str, item: str
) -> npt.NDArray[Any]:
    """A text (``U``/``S``) or object array as an array of ``dtype``, element by element."""
    values = [_python_integer(v, where, item, at) for at, v in enumerate(array.tolist())]
    if dtype.kind in "iu" and values:
        info = numpy.iinfo(dtype)
        for at, value in enumerate(values):
            if not int(info.min) <= value <= int(info.max):
                raise FormatError(_range_error(where, item, value, at, dtype))
    return numpy.array(values, dtype=dtype)


def to_tokens(
    values: object, dtype: npt.DTypeLike, where: str, item: str = "token"
) -> npt.NDArray[Any]:
    """Convert ``values`` to a contiguous 1-D array of ``dtype``, refusing lossy casts.

    Takes what ``numpy.array(values, dtype=dtype)`` takes (megatron-core's conversion):
    numeric arrays, torch tensors, lists of numbers or numpy scalars, and number strings
    (``"42"``, ``b"42"``); stricter than numpy in one way: a value that would change on
    the way (out of ``dtype``'s range, or not a whole number) is a FormatError naming
    it and its position, where numpy wraps or truncates it silently.
    """
    target = numpy.dtype(dtype)
    try:
        array = as_numpy(values)
    except FormatError as error:
        raise FormatError(f"{where}: {error}") from None
    if array.dtype.kind in "USO":
        array = _parse_integers(_elements(values, array, where), target, where, item)
    if array.dtype != target:
        check_fits(array, target, where, item)
        array = array.astype(target)
    return numpy.ascontiguousarray(array)
