"""The identity of a ``.bin``/``.idx`` pair in index-cache keys (``tokenloom.cache``).

Sizes and mtimes of both files and an MD5 of the head and tail of the ``.idx``
(:data:`IDENTITY_SAMPLE_BYTES` each): a dataset regenerated under the same path gets a
different identity, hence different cache keys, even when its sizes and mtime are
restored. The digest is remembered per process by the ``.idx``'s inode, size, mtime
and ctime (an in-place rewrite can restore the mtime with ``os.utime``, not the ctime).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Dict

from tokenloom.errors import CacheError

__all__ = ["IDENTITY_SAMPLE_BYTES", "file_identity", "sampled_md5"]

IDENTITY_SAMPLE_BYTES = 1 << 18
_SAMPLED_MD5: Dict[tuple, str] = {}


def sampled_md5(data: bytes) -> str:
    """``md5_head_tail`` of a file whose whole content is ``data`` (already read)."""
    digest = hashlib.md5(data[:IDENTITY_SAMPLE_BYTES], usedforsecurity=False)
    tail = len(data) - IDENTITY_SAMPLE_BYTES if len(data) > 2 * IDENTITY_SAMPLE_BYTES \
        else IDENTITY_SAMPLE_BYTES
    digest.update(data[tail:])
    return digest.hexdigest()


def _sampled_md5(path: str, stat: os.stat_result) -> str:
    memo = (path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if memo not in _SAMPLED_MD5:
        _SAMPLED_MD5[memo] = _read_sampled_md5(path, stat.st_size)
    return _SAMPLED_MD5[memo]


def _read_sampled_md5(path: str, size: int) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        digest.update(handle.read(IDENTITY_SAMPLE_BYTES))
        if size > 2 * IDENTITY_SAMPLE_BYTES:
            handle.seek(size - IDENTITY_SAMPLE_BYTES)
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
