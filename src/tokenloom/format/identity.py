"""The identity of a ``.bin``/``.idx`` pair: what index-cache keys and pickled datasets
compare to tell that the files are still the ones they were built from.

``file_identity(prefix)`` is::

    {"idx": {"size": ..., "mtime_ns": ..., DIGEST_NAME: <digest of every byte>},
     "bin": {"size": ..., "mtime_ns": ...}}

The ``.idx`` is hashed whole (it is small next to the ``.bin``): xxHash's XXH3-128
where the ``xxhash`` package is installed, else BLAKE2b-128 from ``hashlib``; the key
:data:`DIGEST_NAME` says which, so identities from the two never compare equal. Any
change to any byte of the ``.idx`` (its sizes, pointers and document boundaries) gives
a new identity. The ``.bin`` is identified by its size and modification time only:
its tokens shape no index, and hashing it would cost a full read of the corpus.

Digests are remembered per process (:data:`tokenloom.process_caches.IDX_DIGESTS`) by
the ``.idx``'s absolute path, inode, size, ``mtime_ns`` and ``ctime_ns``: an in-place
rewrite can restore the mtime with ``os.utime``, not the ctime.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable
from stat import S_ISREG
from typing import BinaryIO, Optional, Union

from tokenloom.errors import CacheError
from tokenloom.process_caches import IDX_DIGESTS

__all__ = ["DIGEST_NAME", "digest_bytes", "file_identity", "idx_digest", "identity_of", "stat_key"]

Bytes = Union[bytes, bytearray, memoryview]
_CHUNK = 8 << 20


def _hasher() -> tuple[str, Callable[[], object]]:
    try:
        import xxhash
    except ImportError:
        return "blake2b_128", lambda: hashlib.blake2b(digest_size=16)
    return "xxh3_128", xxhash.xxh3_128


DIGEST_NAME, _new_hash = _hasher()
"""The key of the ``.idx`` digest in an identity (``"xxh3_128"`` or ``"blake2b_128"``)."""


def digest_bytes(data: Bytes) -> str:
    """The digest of a whole file whose content is ``data`` (hex)."""
    digest = _new_hash()
    view = memoryview(data).cast("B")
    for start in range(0, max(len(view), 1), _CHUNK):
        digest.update(view[start : start + _CHUNK])  # type: ignore[attr-defined]
    return str(digest.hexdigest())  # type: ignore[attr-defined]


def stat_key(stat: os.stat_result) -> tuple[int, int, int, int]:
    """``(size, mtime_ns, ctime_ns, inode)``: what changes when a file is rewritten."""
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


def idx_digest(path: str, stat: os.stat_result, data: Optional[Bytes] = None) -> str:
    """The digest of the ``.idx`` at ``path`` whose ``stat`` is given (``data``: its
    content, already read or mapped), remembered by path and :func:`stat_key`."""
    memo = (os.path.abspath(path), *stat_key(stat))
    known = IDX_DIGESTS.get(memo)
    if known is not None:
        return known
    if data is not None:
        return IDX_DIGESTS.put(memo, digest_bytes(data))
    digest = _new_hash()
    with _open_regular(path) as handle:
        while True:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            digest.update(chunk)  # type: ignore[attr-defined]
        after = os.fstat(handle.fileno())
    text = str(digest.hexdigest())  # type: ignore[attr-defined]
    if stat_key(after) == stat_key(stat):  # unchanged while read: safe to remember
        IDX_DIGESTS.put(memo, text)
    return text


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading without blocking on a FIFO or device swapped in
    (OSError when it is not a regular file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    if not S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return open(fd, "rb")


def identity_of(
    idx_stat: os.stat_result, digest: str, bin_stat: os.stat_result
) -> OrderedDict[str, OrderedDict[str, object]]:
    """The identity of a pair from its files' ``stat`` and the ``.idx`` digest."""
    idx: OrderedDict[str, object] = OrderedDict(
        [("size", idx_stat.st_size), ("mtime_ns", idx_stat.st_mtime_ns), (DIGEST_NAME, digest)]
    )
    bin_: OrderedDict[str, object] = OrderedDict(
        [("size", bin_stat.st_size), ("mtime_ns", bin_stat.st_mtime_ns)]
    )
    return OrderedDict([("idx", idx), ("bin", bin_)])


def file_identity(path_prefix: str) -> OrderedDict[str, OrderedDict[str, object]]:
    """The identity of ``<prefix>.idx`` and ``<prefix>.bin`` (see the module docstring);
    CacheError naming the file when one cannot be read (the identity keys caches)."""
    idx_path, bin_path = f"{path_prefix}.idx", f"{path_prefix}.bin"
    try:
        idx_stat = os.stat(idx_path)
        digest = idx_digest(idx_path, idx_stat)
    except OSError as error:
        raise CacheError(f"{idx_path}: cannot identify the dataset file ({error})") from None
    try:
        bin_stat = os.stat(bin_path)
    except OSError as error:
        raise CacheError(f"{bin_path}: cannot identify the dataset file ({error})") from None
    return identity_of(idx_stat, digest, bin_stat)
