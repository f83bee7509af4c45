"""Open a small prefix for a cold build by reading its ``.idx`` in one call.

A cold build over thousands of small prefixes needs, of each, the ``.idx`` sections
(to build the GPT indices), its header facts and the file identity of the pair (for
the cache key); the ``.bin`` is read only when samples are. Opening an
``IndexedDataset`` for that maps both files, validates them, hashes the head and tail
of the ``.idx`` in a second read, and is then closed again: most of a cold start.

:func:`open_small_prefix` reads the ``.idx`` once (open, ``fstat``, ``read``), parses
and validates it exactly as ``IndexedDataset`` does (same :class:`IndexFile`), takes
the sampled MD5 of :func:`tokenloom.cache.file_identity` from the same bytes, checks
the ``.bin`` by ``stat`` (present, regular, large enough for the last sequence), records
the facts in the start-up memo and returns a
:class:`~tokenloom.datasets._deferred.DeferredIndexedDataset` whose ``.idx`` sections
are already loaded; the ``.bin`` is opened on first read. Whenever anything is
unusual (a large, recent or changing file, a missing or short ``.bin``) it returns
None and the caller opens the prefix in full, which reports problems as usual.
"""

from __future__ import annotations

import os
import stat as stat_module
import time
from typing import Any, Optional

__all__ = ["SMALL_IDX_BYTES", "open_small_prefix"]

SMALL_IDX_BYTES = 1 << 20
"""``.idx`` files up to this size are read whole (larger ones are memory-mapped)."""


def _read_small(idx_path: str):
    """``(bytes, stat)`` of ``idx_path`` when it is a small regular file, else None."""
    try:
        fd = os.open(idx_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat_module.S_ISREG(before.st_mode) or before.st_size > SMALL_IDX_BYTES:
            return None
        data = os.read(fd, before.st_size + 1)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if len(data) != before.st_size or _stat_key(after) != _stat_key(before):
        return None  # changing while read
    return data, after


def _stat_key(stat: os.stat_result) -> list:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def open_small_prefix(memo: Any, prefix: str, config: Any) -> Optional[Any]:
    """A deferred dataset for ``prefix`` with its ``.idx`` loaded, recorded in ``memo``;
    None when the prefix must be opened in full (see the module docstring)."""
    from tokenloom._file_identity import sampled_md5
    from tokenloom._startup_memo import RACY_WINDOW_NS, PrefixFacts
    from tokenloom.datasets._deferred import DeferredIndexedDataset
    from tokenloom.format import DType
    from tokenloom.format.reader import IndexFile

    idx_path = os.path.abspath(prefix + ".idx")
    read = _read_small(idx_path)
    if read is None:
        return None
    data, idx_stat = read
    if max(idx_stat.st_mtime_ns, idx_stat.st_ctime_ns) > time.time_ns() - RACY_WINDOW_NS:
        return None  # too recent to be told apart by its stat later
    try:
        bin_stat = os.stat(prefix + ".bin")
    except OSError:
        return None
    if not stat_module.S_ISREG(bin_stat.st_mode):
        return None
    index = IndexFile(idx_path, False, config.sequences_for(prefix), None,
                      check_documents=not config.fast_cache_load, data=data)
    header = index.header
    if header.sequence_count and bin_stat.st_size < int(index.pointers[-1]) + \
            int(index.lengths[-1]) * DType.size(header.dtype):
        return None  # a short .bin: the full open names it
    facts = PrefixFacts(prefix, _stat_key(idx_stat), DType.code_from_dtype(header.dtype),
                        header.sequence_count, header.document_count, sampled_md5(data),
                        {"size": bin_stat.st_size, "mtime_ns": bin_stat.st_mtime_ns},
                        idx_path=idx_path)
    memo.record_facts(facts)
    dataset = DeferredIndexedDataset(facts, memo.lengths, mmap=config.mmap_bin_files,
                                     fast_cache_load=config.fast_cache_load)
    dataset.__dict__["_index"] = index  # the sections; the .bin opens on first read
    return dataset
