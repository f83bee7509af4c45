"""Cache keys: the canonical description of every input that shaped some index arrays.

``describe(identifiers) -> str``
    Canonical compact JSON text (in the given order) of a mapping of identifiers;
    objects with ``unique_identifiers`` (tokenizers, datasets) are serialised by it.
``json_scalar(value) -> str``
    ``describe(value)`` for a str, int or None, without the encoder's set-up.
``description_hash(text) -> str``
    MD5 hex digest of a description text.
``array_digest(array) -> str``
    Content digest of a small array (e.g. the document ids a split exposes); handy as
    a ``checks`` value.
``CacheKey(class_name, split_name, identifiers)``
    ``.description`` (text), ``.hash``, ``.stem`` (``<hash>-<Class>-<split>``).
    ``CacheKey.from_description(class_name, split_name, description)``: for callers
    that wrote ``describe(identifiers)`` themselves; its ``.identifiers`` are the
    description parsed back, on first access.

The description must contain EVERY input that shapes the arrays (config fields, sizes,
the identity of the data files from :func:`tokenloom.format.identity.file_identity`,
...), so that a cache is reused only when nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from collections.abc import Mapping as _MappingABC
from dataclasses import dataclass, field
from enum import Enum
from json.encoder import encode_basestring_ascii
from typing import Optional

import numpy

from tokenloom.attributes import read_attribute

__all__ = ["CacheKey", "array_digest", "describe", "description_hash", "json_scalar"]


_ABSENT = object()


def _jsonable(obj: object) -> object:
    identifiers = read_attribute(obj, "unique_identifiers", _ABSENT)
    if identifiers is not _ABSENT:
        return identifiers
    if isinstance(obj, Enum):
        return obj.name
    if isinstance(obj, numpy.generic):
        return obj.item()
    if isinstance(obj, numpy.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    fields: OrderedDict[str, object] = OrderedDict(
        [("class", f"{type(obj).__module__}.{type(obj).__qualname__}")]
    )
    for name, value in sorted(read_attribute(obj, "__dict__", {}).items()):
        if not name.startswith("_") and isinstance(value, (str, int, float, bool, type(None))):
            fields[name] = value  # stable, unlike a repr holding a memory address
    return fields


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_jsonable)  # stateless per call


def describe(identifiers: Mapping[str, object]) -> str:
    """Canonical JSON text of ``identifiers`` (keeps their order, like megatron-core):
    ``json.dumps(identifiers, separators=(",", ":"), default=...)``.

    Compact, so that the C encoder writes it (an indented text takes the pure-Python
    encoder)."""
    return _ENCODER.encode(identifiers)


def json_scalar(value: object) -> str:
    """``describe(value)`` for a str, an int (not a bool) or None; other values go
    through :func:`describe`."""
    if type(value) is str:
        return str(encode_basestring_ascii(value))
    if type(value) is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return _ENCODER.encode(value)


def description_hash(text: str) -> str:
    """MD5 hex digest of a description text."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def array_digest(array: numpy.ndarray) -> str:
    """MD5 of an array's dtype, shape and bytes."""
    if not (isinstance(array, numpy.ndarray) and array.ndim and array.flags.c_contiguous):
        array = numpy.ascontiguousarray(array)  # (at least 1-D)
    digest = hashlib.md5(f"{array.dtype.str}{array.shape}".encode(), usedforsecurity=False)
    digest.update(array.data.cast("B"))  # its bytes, C order
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """Identifies one set of cached arrays by the description of their inputs."""

    class_name: str
    split_name: str
    identifiers: Mapping[str, object] = field(repr=False)
    description: str = field(init=False, repr=False)
    hash: str = field(init=False)

    def __post_init__(self) -> None:
        text = describe(self.identifiers)
        object.__setattr__(self, "description", text)
        object.__setattr__(self, "hash", description_hash(text))

    @classmethod
    def from_description(cls, class_name: str, split_name: str, description: str) -> CacheKey:
        """The key of the identifiers whose ``describe`` text the caller wrote itself
        (``description``, which must be exactly that text). ``key.identifiers`` is
        the description parsed back (JSON types), on first access."""
        key = object.__new__(cls)
        vars(key).update(  # the fields, as __init__ sets them (frozen: no __setattr__)
            class_name=class_name,
            split_name=split_name,
            identifiers=_ParsedIdentifiers(description),
            description=description,
            hash=hashlib.md5(description.encode("utf-8"), usedforsecurity=False).hexdigest(),
        )
        return key

    @property
    def stem(self) -> str:
        """``<hash>-<Class>-<split>``, the common file name prefix."""
        return f"{self.hash}-{self.class_name}-{self.split_name}"


class _ParsedIdentifiers(_MappingABC):  # type: ignore[type-arg]
    """The identifiers a description text holds, parsed on first use (read only)."""

    __slots__ = ("_text", "_value")

    def __init__(self, text: str) -> None:
        self._text = text
        self._value: Optional[Mapping[str, object]] = None

    def _get(self) -> Mapping[str, object]:
        if self._value is None:
            self._value = json.loads(self._text, object_pairs_hook=OrderedDict)
        return self._value

    def __getitem__(self, name: str) -> object:
        return self._get()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (_ParsedIdentifiers, (self._text,))
