"""tokenloom's errors, as megatron-core's callers catch them.

megatron-core validates with ``assert`` (and raises ``IndexError``/``ValueError`` in a
few places), so code written against it catches ``AssertionError``. Under the compat
layer a tokenloom error leaving a Megatron-named entry point keeps its class, message
and traceback, and becomes also an ``AssertionError``: its class is swapped, in place,
for a subclass of both (``megatron_flavour``). ``ConfigError`` and its kin already are
``ValueError``s, and ``SampleIndexError`` an ``IndexError``.

The flavoured classes are made once, at import, for every error in
:mod:`tokenloom.errors`, and on first use for tokenloom errors defined elsewhere
(``tokenloom.format``'s ``MissingFileError``, ...); any other error passes through
unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from tokenloom import errors as _errors
from tokenloom.attributes import read_attribute
from tokenloom.process_caches import FLAVOURED_ERRORS

__all__ = ["FLAVOURED", "megatron_flavour", "raises_like_megatron", "translate_errors"]

F = TypeVar("F", bound=Callable[..., Any])


def _flavoured_classes() -> dict[type, type]:
    classes = {}
    for value in vars(_errors).values():
        if (
            isinstance(value, type)
            and issubclass(value, _errors.TokenloomError)
            and value.__module__ == _errors.__name__
        ):
            classes[value] = type(
                value.__name__,
                (value, AssertionError),
                {"__module__": value.__module__, "__qualname__": value.__qualname__},
            )
    return classes


FLAVOURED: dict[type, type] = _flavoured_classes()
"""``{tokenloom error class: the same class, also an AssertionError}`` (fixed at import)."""


def _flavour_of(cls: type) -> type:
    """The flavoured twin of a tokenloom error class defined outside :mod:`tokenloom.errors`
    (``MissingFileError``, ...), made once per class."""
    flavoured = FLAVOURED_ERRORS.get(cls)
    if flavoured is None:
        flavoured = FLAVOURED_ERRORS.put(
            cls,
            type(
                cls.__name__,
                (cls, AssertionError),
                {"__module__": cls.__module__, "__qualname__": cls.__qualname__},
            ),
        )
    return flavoured


def megatron_flavour(error: BaseException) -> BaseException:
    """``error`` itself, made also an ``AssertionError`` when it is a tokenloom error."""
    cls = type(error)
    if isinstance(error, AssertionError) or not isinstance(error, _errors.TokenloomError):
        return error
    error.__class__ = FLAVOURED.get(cls) or _flavour_of(cls)
    return error


def raises_like_megatron(function: F) -> F:
    """Wrap ``function`` so that the tokenloom errors it raises are flavoured."""
    if read_attribute(function, "__tokenloom_flavoured__", False):
        return function

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except _errors.TokenloomError as error:
            megatron_flavour(error)
            raise

    wrapper.__tokenloom_flavoured__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def translate_errors(*names: str) -> Callable[[type], type]:
    """Class decorator: flavour the errors of the named methods (defined anywhere in
    the class's bases; static and class methods keep their kind)."""

    def decorate(cls: type) -> type:
        for name in names:
            raw = inspect.getattr_static(cls, name)
            if isinstance(raw, staticmethod):
                setattr(cls, name, staticmethod(raises_like_megatron(raw.__func__)))
            elif isinstance(raw, classmethod):
                setattr(cls, name, classmethod(raises_like_megatron(raw.__func__)))
            elif isinstance(raw, property):
                getter = None if raw.fget is None else raises_like_megatron(raw.fget)
                setattr(cls, name, property(getter, raw.fset, raw.fdel, raw.__doc__))
            else:
                setattr(cls, name, raises_like_megatron(raw))
        return cls

    return decorate
