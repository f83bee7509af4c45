"""tokenloom.cache: a content-addressed, atomic, validated cache of index arrays.

Datasets (``GPTDataset``, ``BlendedDataset``) cache the index arrays they build in a
directory ``path_to_cache``, one file per entry (see :mod:`tokenloom._cache_file`)::

    <hash>-<Class>-<split>-indices.cache    a JSON header (what the arrays were built
                                            from, plus dtype/shape/size/CRC32 of each
                                            array) followed by the arrays, 64-byte aligned

    packs/<id>-pack.cache                   many small entries, byte for byte, behind a
                                            CRC-checked table (see :mod:`tokenloom._cache_pack`)

Entries stored while :func:`tokenloom._cache_pack.collect_small_entries` is active for
the directory (the builder, around a blend's datasets) go into one pack file; lookups
fall back to the packs when an entry file is missing. ``.stems()`` lists both kinds.

``<hash>`` is the MD5 of the description JSON. The description must contain EVERY
input that shapes the arrays (config fields, sizes, the identity of the data files
from :func:`file_identity`, ...), so a cache is reused only when nothing changed.

API
---
``describe(identifiers) -> str``
    Canonical compact JSON text (in the given order) of a mapping of identifiers;
    objects with ``unique_identifiers`` (tokenizers, datasets) are serialised by it.
``description_hash(text) -> str``
    MD5 hex digest of a description text.
``file_identity(path_prefix) -> dict``
    Identity of ``<prefix>.idx``/``<prefix>.bin``: sizes, ``mtime_ns`` and an MD5 of
    the head and tail of the ``.idx``. A dataset regenerated under the same path gets a
    different identity, hence a different cache key.
``array_digest(array) -> str``
    Cheap content digest of a small array (e.g. the document ids a split exposes);
    handy as a ``checks`` value.
``CacheKey(class_name, split_name, identifiers)``
    ``.description`` (text), ``.hash``, ``.stem`` (``<hash>-<Class>-<split>``).
    ``CacheKey.from_description(class_name, split_name, description)``: for callers
    that wrote ``describe(identifiers)`` themselves, faster (see ``GPTDataset``);
    its ``.identifiers`` are the description parsed back, on first access.
``json_scalar(value) -> str``
    ``describe(value)`` for a str, int or None, without the encoder's set-up.
``IndexCache(path_to_cache)``
    ``.entry_path(key)`` (also ``.description_path(key)``, the commit marker, and
    ``.paths(key, names) -> {name: path}``, all the one entry file);
    ``.exists(key, names) -> bool``: the file is present (cheap, no validation);
    ``.lookup(key, names, mmap=True, verify="checksum", checks=None,
    on_corrupt="miss") -> {name: ndarray} | None``: ``None`` on a miss (no file, or
    ``checks`` differ from those stored); a corrupt or truncated file is a miss
    (``on_corrupt="miss"``, the caller rebuilds) or a
    :class:`~tokenloom.errors.CacheError` (``on_corrupt="raise"``);
    ``.load(...)``: like ``lookup`` but a miss raises ``CacheError`` naming the path;
    ``.store(key, arrays, checks=None) -> {name: path}``: writes the entry through one
    temporary file and one rename. Not fsynced (``durable=False``): a cache is
    rebuildable and every load checks the header CRC, the description against the
    key, the arrays' extents and the file size (and the arrays' CRC32s with
    ``verify="checksum"``), so a file torn by a power loss is a miss, never used;
    ``.lazy(key, names, verify="size", checks=None) -> LazyArrays``: arrays mapped at
    first ``lazy[name]`` access (for ``defer_npy_index_mmap``).

``verify`` levels: ``"size"`` checks everything but the arrays' bytes; ``"checksum"``
also checks their CRC32s. Mapped arrays hold no file descriptor.
The cache knows nothing about ranks: callers decide who builds (``build_if_missing``)
and who waits; a rank that finds no cache gets ``None``/``CacheError``, never a hang.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import OrderedDict
from collections.abc import Mapping as _MappingABC
from dataclasses import dataclass, field
from enum import Enum
from json.encoder import encode_basestring_ascii
from typing import Dict, Iterable, List, Mapping, Optional

import numpy

from tokenloom import _cache_file, _cache_pack
from tokenloom._file_identity import file_identity
from tokenloom._atomic import atomic_write_bytes
from tokenloom.errors import CacheError

__all__ = [
    "CACHE_FORMAT",
    "ENTRY_SUFFIX",
    "describe",
    "description_hash",
    "file_identity",
    "array_digest",
    "CacheKey",
    "IndexCache",
    "json_scalar",
    "LazyArrays",
]

CACHE_FORMAT = "tokenloom-index-cache/3"
ENTRY_SUFFIX = "indices.cache"


def _jsonable(obj: object) -> object:
    if hasattr(obj, "unique_identifiers"):
        return obj.unique_identifiers
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
    fields = OrderedDict([("class", f"{type(obj).__module__}.{type(obj).__qualname__}")])
    for name, value in sorted(getattr(obj, "__dict__", {}).items()):
        if not name.startswith("_") and isinstance(value, (str, int, float, bool, type(None))):
            fields[name] = value  # stable, unlike a repr holding a memory address
    return fields


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_jsonable)  # stateless per call


def describe(identifiers: Mapping[str, object]) -> str:
    """Canonical JSON text of ``identifiers`` (keeps their order, like megatron-core):
    ``json.dumps(identifiers, separators=(",", ":"), default=...)``.

    Compact, so that the C encoder writes it (an indented text takes the pure-Python
    encoder, ten times slower: it was most of a warm start over many prefixes)."""
    return _ENCODER.encode(identifiers)


def json_scalar(value: object) -> str:
    """``describe(value)`` for a str, an int (not a bool) or None; other values go
    through :func:`describe`. (``describe`` sets up an encoder per call, which costs
    more than the text of a few scalars.)"""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return describe(value)


def description_hash(text: str) -> str:
    """MD5 hex digest of a description text."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def array_digest(array: numpy.ndarray) -> str:
    """MD5 of an array's dtype, shape and bytes."""
    if not (isinstance(array, numpy.ndarray) and array.ndim and array.flags.c_contiguous):
        array = numpy.ascontiguousarray(array)  # (at least 1-D)
    digest = hashlib.md5(f"{array.dtype.str}{array.shape}".encode(), usedforsecurity=False)
    digest.update(array)  # its bytes, C order
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
    def from_description(cls, class_name: str, split_name: str, description: str) -> "CacheKey":
        """The key of the identifiers whose ``describe`` text the caller wrote itself
        (``description``, which must be exactly that text). ``key.identifiers`` is
        the description parsed back (JSON types), on first access: a warm start over
        many prefixes never reads it."""
        key = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(key, "class_name", class_name)
        setattr_(key, "split_name", split_name)
        setattr_(key, "identifiers", _ParsedIdentifiers(description))
        setattr_(key, "description", description)
        setattr_(key, "hash", description_hash(description))
        return key

    @property
    def stem(self) -> str:
        """``<hash>-<Class>-<split>``, the common file name prefix."""
        return f"{self.hash}-{self.class_name}-{self.split_name}"


class _ParsedIdentifiers(_MappingABC):
    """The identifiers a description text holds, parsed on first use (read only)."""

    __slots__ = ("_text", "_value")

    def __init__(self, text: str) -> None:
        self._text, self._value = text, None

    def _get(self) -> Mapping[str, object]:
        if self._value is None:
            self._value = json.loads(self._text, object_pairs_hook=OrderedDict)
        return self._value

    def __getitem__(self, name: str) -> object:
        return self._get()[name]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())

    def __reduce__(self):
        return (_ParsedIdentifiers, (self._text,))


class IndexCache:
    """A directory of cached index arrays; see the module docstring for the API."""

    def __init__(self, path_to_cache: "str | os.PathLike") -> None:
        self.path_to_cache = os.fspath(path_to_cache)

    def __repr__(self) -> str:
        return f"IndexCache({self.path_to_cache!r})"

    def entry_path(self, key: CacheKey) -> str:
        """The one file holding the entry of ``key``: description and arrays."""
        return os.path.join(self.path_to_cache, f"{key.stem}-{ENTRY_SUFFIX}")

    def description_path(self, key: CacheKey) -> str:
        """The commit marker of an entry: its file (written last, atomically), or the
        pack file holding it (see :mod:`tokenloom._cache_pack`)."""
        path = self.entry_path(key)
        if os.path.isfile(path):
            return path
        queued = _cache_pack.pending(self.path_to_cache, key.stem)
        where = queued or _cache_pack.locate(self.path_to_cache, key.stem)
        return path if where is None else where[0]

    def paths(self, key: CacheKey, names: Iterable[str]) -> Dict[str, str]:
        """Where each array lives: all in the entry file."""
        return {name: self.entry_path(key) for name in names}

    def stems(self) -> List[str]:
        """The stems of every entry in the directory: entry files and pack entries."""
        try:
            names = os.listdir(self.path_to_cache)
        except OSError:
            return []
        suffix = f"-{ENTRY_SUFFIX}"
        files = {n[: -len(suffix)] for n in names if n.endswith(suffix)}
        return sorted(files.union(_cache_pack.stems(self.path_to_cache)))

    def exists(self, key: CacheKey, names: Iterable[str] = ()) -> bool:
        return os.path.isfile(self.entry_path(key)) \
            or _cache_pack.pending(self.path_to_cache, key.stem) is not None \
            or _cache_pack.locate(self.path_to_cache, key.stem) is not None

    def lookup(self, key: CacheKey, names: Iterable[str], *, mmap: bool = True,
               verify: str = "checksum", checks: Optional[Mapping[str, object]] = None,
               on_corrupt: str = "miss") -> Optional[Dict[str, numpy.ndarray]]:
        """The cached arrays, or ``None`` on a miss; see the module docstring."""
        if verify not in ("size", "checksum") or on_corrupt not in ("miss", "raise"):
            raise ValueError(f"verify={verify!r}/on_corrupt={on_corrupt!r} not supported")
        path = self.entry_path(key)
        try:
            try:
                handle = open(path, "rb")
            except FileNotFoundError:
                return self._lookup_packed(key, names, verify, checks, on_corrupt)
            with handle:
                return _read_entry(handle, path, key, names, mmap, verify, checks)
        except (OSError, _cache_file.Corrupt) as error:
            return _unusable(error, path, path, on_corrupt)

    def _lookup_packed(self, key: CacheKey, names: Iterable[str], verify: str,
                       checks: Optional[Mapping[str, object]], on_corrupt: str
                       ) -> Optional[Dict[str, numpy.ndarray]]:
        """:meth:`lookup` of an entry held by a pack file (or queued for one)."""
        queued = _cache_pack.pending(self.path_to_cache, key.stem)
        where = None if queued else _cache_pack.locate(self.path_to_cache, key.stem)
        if queued is None and where is None:
            return None
        pack = (queued or where)[0]
        path = f"{pack} (entry {key.stem})"
        try:
            data = queued[1] if queued else _cache_pack.read_entry(where)
            return _read_entry(io.BytesIO(data), path, key, names, True, verify, checks, data)
        except (OSError, _cache_file.Corrupt) as error:
            return _unusable(error, path, pack, on_corrupt)

    def load(self, key: CacheKey, names: Iterable[str], **kwargs) -> Dict[str, numpy.ndarray]:
        """Like :meth:`lookup` (corruption raises), but a miss raises CacheError too."""
        kwargs.setdefault("on_corrupt", "raise")
        arrays = self.lookup(key, list(names), **kwargs)
        if arrays is None:
            raise CacheError(
                f"index cache not found: {self.entry_path(key)} is missing or stale; build it "
                "first (tokenloom prepare-cache, or let one rank build it) or check path_to_cache"
            )
        return arrays

    def store(self, key: CacheKey, arrays: Mapping[str, numpy.ndarray],
              checks: Optional[Mapping[str, object]] = None) -> Dict[str, str]:
        """Write the description and every array to the entry file, atomically."""
        path = self.entry_path(key)
        record = OrderedDict([("format", CACHE_FORMAT), ("class", key.class_name),
                              ("split", key.split_name), ("hash", key.hash),
                              ("description", _cache_file.RawJSON(key.description)),
                              ("checks", dict(checks or {}))])
        try:
            if _cache_pack.active(self.path_to_cache):
                data = _cache_file.entry_bytes(record, arrays)
                pack = _cache_pack.queue(self.path_to_cache, key.stem, data)
                if pack is not None:
                    return {**{name: pack for name in arrays}, "description": pack}
                atomic_write_bytes(path, data, durable=False)
            else:
                _cache_file.write_entry(path, record, arrays)
        except OSError as error:
            raise CacheError(
                f"cannot write the index cache in {self.path_to_cache} ({error}); set "
                "path_to_cache to a writable directory"
            ) from None
        return {**self.paths(key, arrays), "description": path}

    def lazy(self, key: CacheKey, names: Iterable[str], verify: str = "size",
             checks: Optional[Mapping[str, object]] = None) -> "LazyArrays":
        return LazyArrays(self, key, tuple(names), verify, checks)


def _read_entry(handle, path: str, key: CacheKey, names: Iterable[str], mmap: bool,
                verify: str, checks: Optional[Mapping[str, object]],
                data: Optional[bytes] = None) -> Optional[Dict[str, numpy.ndarray]]:
    """The arrays of the entry open as ``handle`` (``data``: its bytes, already in
    memory), or None when its ``checks`` differ; Corrupt when it is damaged."""
    record, start = _cache_file.read_record(handle, path, size=None if data is None else len(data))
    _check_record(path, record, key)
    if not _checks_agree(record.get("checks"), checks):
        return None
    return _cache_file.open_arrays(handle, path, record, start, list(names), mmap, verify,
                                   buffer=data)


def _unusable(error: Exception, path: str, delete: str, on_corrupt: str) -> None:
    """A damaged or unreadable entry: a miss, or (``on_corrupt="raise"``) a CacheError
    saying to delete ``delete``."""
    problem = error if isinstance(error, _cache_file.Corrupt) \
        else _cache_file.Corrupt(f"{path}: unreadable ({error})")
    if on_corrupt == "raise":
        raise CacheError(f"{problem}; delete {delete} and rebuild") from None
    return None


def _check_record(path: str, record: object, key: CacheKey) -> None:
    """The header must be this format's and its description must hash to the key."""
    if not isinstance(record, dict) or record.get("format") != CACHE_FORMAT:
        raise _cache_file.Corrupt(f"{path}: not a {CACHE_FORMAT} cache file")
    if record.get("hash") != key.hash or not isinstance(record.get("description"), dict) \
            or description_hash(describe(record["description"])) != key.hash:
        raise _cache_file.Corrupt(f"{path}: the description does not match the cache key")


def _checks_agree(stored: Optional[Mapping], wanted: Optional[Mapping]) -> bool:
    if not wanted:
        return True
    stored = stored or {}
    return all(k in stored and stored[k] == v for k, v in wanted.items())


class LazyArrays:
    """Cached arrays mmapped on first access (``lazy["sample_index"]``)."""

    def __init__(self, cache: IndexCache, key: CacheKey, names: tuple, verify: str,
                 checks: Optional[Mapping[str, object]] = None) -> None:
        self.cache, self.key, self.names, self.verify = cache, key, names, verify
        self.checks = dict(checks) if checks else None
        self._arrays: Optional[Dict[str, numpy.ndarray]] = None

    @property
    def loaded(self) -> bool:
        return self._arrays is not None

    def __getitem__(self, name: str) -> numpy.ndarray:
        if self._arrays is None:
            self._arrays = self.cache.load(self.key, self.names, verify=self.verify,
                                           checks=self.checks)
        return self._arrays[name]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_arrays"] = None  # workers re-mmap on their own first access
        return state
