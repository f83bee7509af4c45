"""The start-up memo: facts about a blend's files, reused while the files are unchanged.

Opening a blend of thousands of prefixes spends most of its time learning facts that
rarely change: each ``.idx`` header (dtype, sequence and document counts), the sampled
MD5 that :func:`tokenloom.cache.file_identity` puts in the cache keys, and how many
samples each cached GPT index holds. The builder records them in one file per blend,
``<path_to_cache>/<md5>-startup-memo.json``, and a later start reads that one file and
``stat``\\ s each ``.idx``/``.bin`` instead of opening, hashing and loading every prefix.

What is recorded, and why reusing it is safe:

* ``files``: per absolute ``.idx`` path, its ``stat`` identity (size, ``mtime_ns``,
  ``ctime_ns``, inode) and the facts read from it. They are reused only while all four
  are unchanged: rewriting a file changes its mtime and ctime (restoring the mtime with
  ``os.utime`` changes the ctime), regenerating it under the same path changes its inode
  or times. A file modified less than :data:`RACY_WINDOW_NS` before it was looked at
  is never recorded (a second write within one timestamp tick could leave its stat
  unchanged; this is git's "racily clean" rule). The ``.bin`` is stat'ed live at every
  start (its size and mtime are part of the cache key; its content shapes no index).
* ``lengths``: samples per GPT cache stem. A stem is the hash of every input that
  shapes the indices, so the length is a function of the stem and never goes stale.

The file starts with a line ``tokenloom-startup-memo/1 <md5 of the rest>``; a memo that
is truncated, edited or unreadable is ignored with a warning and rewritten, never
used. Writes are atomic (temporary file, then rename). Everything here is an
optimisation: with no memo, or a miss, datasets are opened and keyed in full.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional

from tokenloom._atomic import atomic_write_bytes

__all__ = ["MEMO_FORMAT", "RACY_WINDOW_NS", "PrefixFacts", "StartupMemo", "memo_path"]

logger = logging.getLogger(__name__)

MEMO_FORMAT = "tokenloom-startup-memo/1"
RACY_WINDOW_NS = 2_000_000_000
"""Files modified this recently (ns) are not recorded: their stat may not yet be unique."""


def _stat_key(stat: os.stat_result) -> List[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def memo_path(path_to_cache: str, class_name: str, prefixes: Iterable[str]) -> str:
    """Where the memo of a blend of ``prefixes`` (built as ``class_name``) lives."""
    return _memo_path(path_to_cache, class_name, [os.path.abspath(p) for p in prefixes])


def _memo_path(path_to_cache: str, class_name: str, absolute: List[str]) -> str:
    text = json.dumps([class_name, absolute])
    digest = hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
    return os.path.join(path_to_cache, f"{digest}-startup-memo.json")


def _idx_path(prefix: str, absolute_prefix: Optional[str]) -> str:
    """``os.path.abspath(prefix + ".idx")``, from ``abspath(prefix)`` when that is known:
    normalising never touches a last component other than "", "." or "..", so
    appending ".idx" to such a component commutes with ``abspath``."""
    if absolute_prefix is None or os.path.basename(prefix) in ("", ".", ".."):
        return os.path.abspath(prefix + ".idx")
    return absolute_prefix + ".idx"


class PrefixFacts:
    """What a start needs of one prefix without opening it (valid for one ``.idx`` stat)."""

    __slots__ = ("prefix", "idx_path", "idx_stat", "dtype_code", "sequence_count",
                 "document_count", "idx_md5", "bin_identity")

    def __init__(self, prefix: str, idx_stat: List[int], dtype_code: int, sequence_count: int,
                 document_count: int, idx_md5: str, bin_identity: Optional[Dict] = None, *,
                 idx_path: Optional[str] = None) -> None:
        self.prefix = prefix
        self.idx_path = os.path.abspath(prefix + ".idx") if idx_path is None else idx_path
        self.idx_stat, self.dtype_code = [int(v) for v in idx_stat], int(dtype_code)
        self.sequence_count, self.document_count = int(sequence_count), int(document_count)
        self.idx_md5, self.bin_identity = str(idx_md5), bin_identity

    def file_identity(self) -> "OrderedDict[str, object]":
        """Exactly what :func:`tokenloom.cache.file_identity` returns for these files."""
        idx = OrderedDict([("size", self.idx_stat[0]), ("mtime_ns", self.idx_stat[1]),
                           ("md5_head_tail", self.idx_md5)])
        return OrderedDict([("idx", idx), ("bin", OrderedDict(self.bin_identity))])

    def file_identity_json(self) -> str:
        """``tokenloom.cache.describe(self.file_identity())``, written directly (the
        sizes and times are ints, the digest a str: see ``test_startup_memo``)."""
        from tokenloom.cache import json_scalar

        size, mtime = self.idx_stat[0], self.idx_stat[1]
        bin_ = self.bin_identity
        return (f'{{"idx":{{"size":{size},"mtime_ns":{mtime},"md5_head_tail":'
                f'{json_scalar(self.idx_md5)}}},"bin":{{"size":{json_scalar(bin_["size"])},'
                f'"mtime_ns":{json_scalar(bin_["mtime_ns"])}}}}}')

    def unchanged(self) -> bool:
        """Whether the ``.idx`` still has the recorded stat (the ``.bin`` is re-stat'ed)."""
        try:
            return _stat_key(os.stat(self.idx_path)) == self.idx_stat
        except OSError:
            return False

    def to_json(self) -> list:
        return [*self.idx_stat, self.dtype_code, self.sequence_count, self.document_count,
                self.idx_md5]


def _facts_from_json(prefix: str, row: Any, idx_path: Optional[str] = None) -> PrefixFacts:
    if type(row) is not list or len(row) != 8 or not all(type(v) is int for v in row[:7]) \
            or type(row[7]) is not str:
        raise ValueError(f"malformed entry {row!r}")
    return PrefixFacts(prefix, row[:4], row[4], row[5], row[6], row[7], idx_path=idx_path)


class StartupMemo:
    """The memo of one blend: load it, look facts up, record new ones, save if changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._files: Dict[str, list] = {}
        self._lengths: Dict[str, int] = {}
        self._dirty = False
        self._lock = threading.Lock()
        self._absolute: Dict[str, str] = {}  # prefix -> abspath(prefix), from memo_for

    @classmethod
    def load(cls, path: str) -> "StartupMemo":
        """The memo at ``path``; empty when absent, and (with a warning) when corrupt."""
        memo = cls(path)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return memo
        except OSError as error:
            logger.warning("start-up memo %s is unreadable (%s); ignoring it", path, error)
            return memo
        try:
            memo._parse(data)
        except (ValueError, KeyError, TypeError) as error:
            logger.warning("start-up memo %s is corrupt (%s); ignoring it, it will be rewritten",
                           path, error)
            memo._files, memo._lengths, memo._dirty = {}, {}, True
        return memo

    def _parse(self, data: bytes) -> None:
        head, _, body = data.partition(b"\n")
        fields = head.decode("ascii").split(" ")
        if len(fields) != 2 or fields[0] != MEMO_FORMAT:
            raise ValueError(f"first line is not '{MEMO_FORMAT} <md5>'")
        if hashlib.md5(body, usedforsecurity=False).hexdigest() != fields[1]:
            raise ValueError("checksum mismatch (truncated or edited)")
        record = json.loads(body)
        files, lengths = record["files"], record["lengths"]
        if not isinstance(files, dict) or not isinstance(lengths, dict) \
                or not all(isinstance(n, int) and n >= 0 for n in lengths.values()):
            raise ValueError("'files' and 'lengths' must be mappings")
        self._files, self._lengths = files, lengths

    # -- lookups -------------------------------------------------------------------
    def facts(self, prefix: str) -> Optional[PrefixFacts]:
        """The recorded facts of ``prefix`` if its ``.idx`` is unchanged, else None."""
        idx_path = _idx_path(prefix, self._absolute.get(prefix))
        row = self._files.get(idx_path)
        if row is None:
            return None
        try:
            facts = _facts_from_json(prefix, row, idx_path)
            if _stat_key(os.stat(idx_path)) != facts.idx_stat:
                return None
            bin_stat = os.stat(prefix + ".bin")
        except (OSError, ValueError):
            return None
        facts.bin_identity = OrderedDict([("size", bin_stat.st_size),
                                          ("mtime_ns", bin_stat.st_mtime_ns)])
        return facts

    def length(self, stem: str) -> Optional[int]:
        """Samples of the GPT index cached under ``stem``, when recorded."""
        return self._lengths.get(stem)

    @property
    def lengths(self) -> Dict[str, int]:
        """The recorded lengths, by cache stem (read only)."""
        return self._lengths

    # -- recording -----------------------------------------------------------------
    def record_prefix(self, prefix: str, stat_before: os.stat_result, dataset: Any,
                      identity: Dict) -> None:
        """Record the facts of an opened ``IndexedDataset`` whose ``.idx`` had
        ``stat_before`` when it was opened and ``identity`` (its cache file identity)."""
        from tokenloom.format import DType

        idx_path = os.path.abspath(prefix + ".idx")
        try:
            after = os.stat(idx_path)
        except OSError:
            return
        newest = max(after.st_mtime_ns, after.st_ctime_ns)
        if _stat_key(after) != _stat_key(stat_before) or newest > time.time_ns() - RACY_WINDOW_NS \
                or identity["idx"]["size"] != after.st_size \
                or identity["idx"]["mtime_ns"] != after.st_mtime_ns:
            return  # changed while opened, or too recent to be told apart by its stat
        self.record_facts(PrefixFacts(
            prefix, _stat_key(after), DType.code_from_dtype(dataset.dtype), len(dataset),
            dataset.document_indices.shape[0], identity["idx"]["md5_head_tail"],
            idx_path=idx_path))

    def record_facts(self, facts: PrefixFacts) -> None:
        """Record ``facts`` (checked by the caller: read from an unchanged, not too recent
        ``.idx``)."""
        row = facts.to_json()
        with self._lock:
            if self._files.get(facts.idx_path) != row:
                self._files[facts.idx_path] = row
                self._dirty = True

    def record_length(self, stem: str, length: int) -> None:
        with self._lock:
            if self._lengths.get(stem) != int(length):
                self._lengths[stem] = int(length)
                self._dirty = True

    def save(self) -> None:
        """Write the memo atomically if anything was recorded; failures only warn."""
        if not self._dirty:
            return
        with self._lock:
            body = json.dumps({"files": self._files, "lengths": self._lengths},
                              separators=(",", ":")).encode("utf-8")
            self._dirty = False
        head = f"{MEMO_FORMAT} {hashlib.md5(body, usedforsecurity=False).hexdigest()}\n"
        try:
            atomic_write_bytes(self.path, head.encode("ascii") + body, durable=False)
        except OSError as error:
            logger.warning("could not write the start-up memo %s (%s); the next start will "
                           "open every prefix again", self.path, error)


# -- what the builder uses -------------------------------------------------------------
def memo_for(cls: Any, config: Any, prefixes: List[str]) -> Optional[StartupMemo]:
    """The memo of a blend built as ``cls`` from ``config``, or None where none applies:
    no ``path_to_cache``, object storage, or a class that opens its own low-level data."""
    from tokenloom.datasets.gpt import GPTDataset

    if not getattr(config, "path_to_cache", None) or getattr(config, "mock", False) \
            or not (isinstance(cls, type) and issubclass(cls, GPTDataset)) \
            or cls.build_low_level_dataset is not GPTDataset.build_low_level_dataset \
            or cls.numel_low_level_dataset is not GPTDataset.numel_low_level_dataset \
            or any(p is None or str(p).startswith(("s3://", "msc://")) for p in prefixes):
        return None
    absolute = [os.path.abspath(p) for p in prefixes]
    memo = StartupMemo.load(_memo_path(config.path_to_cache, cls.__name__, absolute))
    memo._absolute = dict(zip(prefixes, absolute))
    return memo


def deferred_low_level(memo: StartupMemo, prefix: str, config: Any) -> Optional[Any]:
    """A :class:`~tokenloom.datasets._deferred.DeferredIndexedDataset` for ``prefix``
    when the memo vouches for it (and agrees with ``sequences_per_dataset``), else None."""
    from tokenloom.datasets._deferred import DeferredIndexedDataset

    facts = memo.facts(prefix)
    if facts is None:
        return None
    given = config.sequences_for(prefix)
    if given is not None and (int(given[0]), int(given[1])) != (facts.sequence_count,
                                                                facts.document_count):
        return None  # let IndexedDataset report the stale counts
    return DeferredIndexedDataset(facts, memo.lengths, mmap=config.mmap_bin_files,
                                  fast_cache_load=config.fast_cache_load)


def open_and_record(memo: StartupMemo, cls: Any, prefix: str, config: Any) -> Any:
    """``cls.build_low_level_dataset(prefix, config)``, recording its facts in ``memo``
    (a small ``.idx`` is read in one call and the ``.bin`` left for later: see
    :mod:`tokenloom._light_open`)."""
    from tokenloom._light_open import open_small_prefix
    from tokenloom.cache import file_identity

    light = open_small_prefix(memo, prefix, config)
    if light is not None:
        return light
    try:
        before = os.stat(prefix + ".idx")
    except OSError:
        before = None  # opening reports the missing file
    dataset = cls.build_low_level_dataset(prefix, config)
    if before is not None:
        memo.record_prefix(prefix, before, dataset, file_identity(prefix))
    return dataset


def record_lengths(memo: StartupMemo, datasets: Iterable[Any]) -> None:
    """Record the length of every dataset whose cached indices are loaded."""
    for dataset in datasets:
        key = getattr(dataset, "cache_key", None)
        if key is not None and getattr(dataset, "indices_loaded", False):
            memo.record_length(key.stem, len(dataset))


def release_opened(memo: StartupMemo, prefix: str, low_level: Any, datasets: List[Any],
                   config: Any) -> None:
    """After a build, hand ``datasets`` a deferred twin of ``low_level`` and close it, so a
    cold build over thousands of prefixes does not keep two descriptors open per prefix
    (a blend reads only a few of them soon). Skipped when the memo could not vouch for
    the files (recent or changed): those stay open."""
    from tokenloom.datasets._deferred import DeferredIndexedDataset

    if isinstance(low_level, DeferredIndexedDataset):
        return
    twin = deferred_low_level(memo, prefix, config)
    if twin is None or len(twin) != len(low_level):
        return
    for dataset in datasets:
        if dataset is not None and getattr(dataset, "dataset", None) is low_level \
                and getattr(dataset, "_source", None) is None:
            dataset.dataset = twin
    low_level.close()
