"""tokenloom.cache: a content-addressed, atomic, validated cache of index arrays.

Datasets (``GPTDataset``, ``BlendedDataset``) cache the index arrays they build as
``.npy`` files plus one description file, in a directory ``path_to_cache``::

    <hash>-<Class>-<split>-description.txt    JSON: what the arrays were built from,
                                              plus dtype/shape/size/CRC32 of each array
    <hash>-<Class>-<split>-<name>.npy         one file per array (e.g. sample_index)

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
``IndexCache(path_to_cache)``
    ``.paths(key, names) -> {name: path}`` and ``.description_path(key)``;
    ``.exists(key, names) -> bool``: every file present (cheap, no validation);
    ``.lookup(key, names, mmap=True, verify="checksum", checks=None,
    on_corrupt="miss") -> {name: ndarray} | None``: ``None`` on a miss (no
    description, or ``checks`` differ from those stored); a corrupt or truncated file
    or description is a miss (``on_corrupt="miss"``, the caller rebuilds) or a
    :class:`~tokenloom.errors.CacheError` (``on_corrupt="raise"``);
    ``.load(...)``: like ``lookup`` but a miss raises ``CacheError`` naming the path;
    ``.store(key, arrays, checks=None) -> {name: path}``: writes every array
    atomically, then the description last (it is the commit marker). The writes are
    not fsynced (``durable=False``): a cache is rebuildable and every load checks
    the description, the ``.npy`` headers and sizes (and CRC32s with
    ``verify="checksum"``), so a file torn by a power loss is a miss, never used;
    ``.lazy(key, names, verify="size", checks=None) -> LazyArrays``: arrays mmapped at first
    ``lazy[name]`` access (for ``defer_npy_index_mmap``).

``verify`` levels: ``"size"`` checks the ``.npy`` header (dtype, shape) and the file
size against the description; ``"checksum"`` also checks the CRC32 of the bytes.
The cache knows nothing about ranks: callers decide who builds (``build_if_missing``)
and who waits; a rank that finds no cache gets ``None``/``CacheError``, never a hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, Iterable, Mapping, Optional

import numpy

from tokenloom._atomic import atomic_save_npy, atomic_write_bytes
from tokenloom.errors import CacheError

__all__ = [
    "CACHE_FORMAT",
    "describe",
    "description_hash",
    "file_identity",
    "array_digest",
    "CacheKey",
    "IndexCache",
    "LazyArrays",
]

CACHE_FORMAT = "tokenloom-index-cache/2"
_IDENTITY_SAMPLE_BYTES = 1 << 18
# (path, inode, size, mtime_ns, ctime_ns) -> digest, per process; ctime because an in-place
# rewrite can restore the mtime (os.utime) but not the ctime
_SAMPLED_MD5: Dict[tuple, str] = {}


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


def describe(identifiers: Mapping[str, object]) -> str:
    """Canonical JSON text of ``identifiers`` (keeps their order, like megatron-core).

    Compact, so that the C encoder writes it (an indented text takes the pure-Python
    encoder, ten times slower: it was most of a warm start over many prefixes)."""
    return json.dumps(identifiers, separators=(",", ":"), default=_jsonable)


def description_hash(text: str) -> str:
    """MD5 hex digest of a description text."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _sampled_md5(path: str, stat: os.stat_result) -> str:
    memo = (path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if memo not in _SAMPLED_MD5:
        _SAMPLED_MD5[memo] = _read_sampled_md5(path, stat.st_size)
    return _SAMPLED_MD5[memo]


def _read_sampled_md5(path: str, size: int) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        digest.update(handle.read(_IDENTITY_SAMPLE_BYTES))
        if size > 2 * _IDENTITY_SAMPLE_BYTES:
            handle.seek(size - _IDENTITY_SAMPLE_BYTES)
        digest.update(handle.read())
    return digest.hexdigest()


def file_identity(path_prefix: str) -> "OrderedDict[str, object]":
    """Sizes, mtimes and a sampled MD5 of ``<prefix>.idx`` and ``<prefix>.bin``."""
    identity: "OrderedDict[str, object]" = OrderedDict()
    for suffix in ("idx", "bin"):
        path = f"{path_prefix}.{suffix}"
        try:
            stat = os.stat(path)
            entry = OrderedDict([("size", stat.st_size), ("mtime_ns", stat.st_mtime_ns)])
            if suffix == "idx":
                entry["md5_head_tail"] = _sampled_md5(os.path.abspath(path), stat)
        except OSError as error:
            raise CacheError(f"{path}: cannot identify the dataset file ({error})") from None
        identity[suffix] = entry
    return identity


def array_digest(array: numpy.ndarray) -> str:
    """MD5 of an array's dtype, shape and bytes."""
    array = numpy.ascontiguousarray(array)
    digest = hashlib.md5(f"{array.dtype.str}{array.shape}".encode(), usedforsecurity=False)
    digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _crc32(array: numpy.ndarray) -> int:
    flat = numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8)
    crc = 0
    for start in range(0, flat.size, 1 << 26):
        crc = zlib.crc32(flat[start : start + (1 << 26)], crc)
    return crc


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

    @property
    def stem(self) -> str:
        """``<hash>-<Class>-<split>``, the common file name prefix."""
        return f"{self.hash}-{self.class_name}-{self.split_name}"


def _read_npy_header(path: str) -> tuple:
    """(dtype, shape, fortran_order, data_offset) of an ``.npy`` file."""
    fmt = numpy.lib.format
    with open(path, "rb") as handle:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(handle)
        return dtype, shape, fortran, handle.tell()


class _Corrupt(Exception):
    """Internal: a cache file does not match its description."""


def _recorded(path: str, meta: object) -> tuple:
    """(dtype, shape, nbytes, crc32) recorded for ``path``; _Corrupt when the
    description was edited into something else."""
    try:
        return (numpy.dtype(meta["dtype"]), tuple(int(n) for n in meta["shape"]),
                int(meta["nbytes"]), int(meta["crc32"]))
    except (KeyError, TypeError, ValueError) as error:
        raise _Corrupt(f"{path}: its entry in the description is malformed ({error!r})") from None


def _open_array(path: str, meta: Mapping[str, object], mmap: bool, verify: str) -> numpy.ndarray:
    """Open one cached ``.npy`` after checking it against its recorded metadata."""
    try:
        dtype, shape, fortran, offset = _read_npy_header(path)
        size = os.path.getsize(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, SyntaxError) as error:
        raise _Corrupt(f"{path}: unreadable .npy header ({error})") from None
    meta_dtype, meta_shape, nbytes, crc = _recorded(path, meta)
    expected = (meta_dtype, meta_shape, False)
    if (dtype, tuple(shape), fortran) != expected:
        raise _Corrupt(f"{path}: header says {dtype}{shape}, description says "
                       f"{expected[0]}{expected[1]}")
    if size != offset + nbytes:
        raise _Corrupt(f"{path}: {size} bytes, expected {offset + nbytes} (truncated?)")
    if nbytes == 0:
        array = numpy.zeros(shape, dtype=dtype)
    elif mmap:
        array = numpy.memmap(path, dtype=dtype, mode="r", shape=tuple(shape), offset=offset)
    else:
        array = numpy.fromfile(path, dtype=dtype, offset=offset).reshape(shape)
    if verify == "checksum" and _crc32(array) != crc:
        raise _Corrupt(f"{path}: CRC32 mismatch, the file is corrupt")
    return array


class IndexCache:
    """A directory of cached index arrays; see the module docstring for the API."""

    def __init__(self, path_to_cache: "str | os.PathLike") -> None:
        self.path_to_cache = os.fspath(path_to_cache)

    def __repr__(self) -> str:
        return f"IndexCache({self.path_to_cache!r})"

    def description_path(self, key: CacheKey) -> str:
        return os.path.join(self.path_to_cache, f"{key.stem}-description.txt")

    def paths(self, key: CacheKey, names: Iterable[str]) -> Dict[str, str]:
        return {name: os.path.join(self.path_to_cache, f"{key.stem}-{name}.npy") for name in names}

    def exists(self, key: CacheKey, names: Iterable[str]) -> bool:
        files = [self.description_path(key), *self.paths(key, names).values()]
        return all(os.path.isfile(path) for path in files)

    def _read_description(self, key: CacheKey) -> Optional[dict]:
        path = self.description_path(key)
        try:
            with open(path, "rt", encoding="utf-8") as handle:
                stored = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise _Corrupt(f"{path}: unreadable description ({error})") from None
        if not isinstance(stored, dict) or stored.get("format") != CACHE_FORMAT:
            raise _Corrupt(f"{path}: not a {CACHE_FORMAT} description")
        # the stored description must hash to the key (JSON text round-trips exactly)
        if stored.get("hash") != key.hash or not isinstance(stored.get("description"), dict) \
                or description_hash(describe(stored["description"])) != key.hash:
            raise _Corrupt(f"{path}: the description does not match the cache key")
        return stored

    def lookup(self, key: CacheKey, names: Iterable[str], *, mmap: bool = True,
               verify: str = "checksum", checks: Optional[Mapping[str, object]] = None,
               on_corrupt: str = "miss") -> Optional[Dict[str, numpy.ndarray]]:
        """The cached arrays, or ``None`` on a miss; see the module docstring."""
        if verify not in ("size", "checksum") or on_corrupt not in ("miss", "raise"):
            raise ValueError(f"verify={verify!r}/on_corrupt={on_corrupt!r} not supported")
        try:
            stored = self._read_description(key)
            if stored is None or not _checks_agree(stored.get("checks"), checks):
                return None
            return self._open_all(key, list(names), stored, mmap, verify)
        except FileNotFoundError:
            return None
        except _Corrupt as error:
            if on_corrupt == "raise":
                raise CacheError(f"{error}; delete the cache files {self.path_to_cache}/"
                                 f"{key.stem}-* and rebuild") from None
            return None

    def _open_all(self, key: CacheKey, names: list, stored: dict, mmap: bool,
                  verify: str) -> Dict[str, numpy.ndarray]:
        arrays = {}
        recorded = stored.get("arrays")
        if not isinstance(recorded, dict):
            raise _Corrupt(f"{self.description_path(key)}: 'arrays' is not a mapping")
        for name, path in self.paths(key, names).items():
            meta = recorded.get(name)
            if meta is None:
                raise _Corrupt(f"{self.description_path(key)}: no entry for array {name!r}")
            arrays[name] = _open_array(path, meta, mmap, verify)
        return arrays

    def load(self, key: CacheKey, names: Iterable[str], **kwargs) -> Dict[str, numpy.ndarray]:
        """Like :meth:`lookup` (corruption raises), but a miss raises CacheError too."""
        names = list(names)
        kwargs.setdefault("on_corrupt", "raise")
        arrays = self.lookup(key, names, **kwargs)
        if arrays is None:
            missing = [p for p in [self.description_path(key), *self.paths(key, names).values()]
                       if not os.path.isfile(p)]
            where = missing[0] if missing else self.description_path(key)
            raise CacheError(
                f"index cache not found: {where} is missing or stale; build it first "
                "(tokenloom prepare-cache, or let one rank build it) or check path_to_cache"
            )
        return arrays

    def store(self, key: CacheKey, arrays: Mapping[str, numpy.ndarray],
              checks: Optional[Mapping[str, object]] = None) -> Dict[str, str]:
        """Write every array, then the description, each atomically."""
        paths = self.paths(key, arrays)
        meta = OrderedDict()
        try:
            os.makedirs(self.path_to_cache, exist_ok=True)
            for name, array in arrays.items():
                array = numpy.ascontiguousarray(array)
                atomic_save_npy(paths[name], array, durable=False)
                meta[name] = OrderedDict([("dtype", array.dtype.str), ("shape", list(array.shape)),
                                          ("nbytes", int(array.nbytes)), ("crc32", _crc32(array))])
            record = OrderedDict([("format", CACHE_FORMAT), ("class", key.class_name),
                                  ("split", key.split_name), ("hash", key.hash),
                                  ("description", json.loads(key.description)),
                                  ("checks", dict(checks or {})), ("arrays", meta)])
            atomic_write_bytes(self.description_path(key),
                               json.dumps(record, separators=(",", ":")).encode(), durable=False)
        except OSError as error:
            raise CacheError(
                f"cannot write the index cache in {self.path_to_cache} ({error}); set "
                "path_to_cache to a writable directory"
            ) from None
        return {**paths, "description": self.description_path(key)}

    def lazy(self, key: CacheKey, names: Iterable[str], verify: str = "size",
             checks: Optional[Mapping[str, object]] = None) -> "LazyArrays":
        return LazyArrays(self, key, tuple(names), verify, checks)


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
