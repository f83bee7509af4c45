"""The start-up shortcut: open and key a blend's prefixes from what is already known.

For one build of the GPT datasets of a blend, a :class:`Startup` (made by
:meth:`Startup.for_blend` when it applies: a ``path_to_cache``, local files, and a
``GPTDataset`` class that opens its low-level data the standard way) uses the blend's
:class:`~tokenloom.builder.memo.StartupMemo`:

* :meth:`Startup.known`: a prefix whose ``.idx`` the memo vouches for becomes a
  :class:`~tokenloom.format.LazyIndexedDataset`, not opened at all;
* :meth:`Startup.open`: any other prefix is opened, and its facts recorded. A small
  ``.idx`` (up to :data:`SMALL_IDX_BYTES`) is read in one call, parsed and validated
  exactly as ``IndexedDataset`` does (same :class:`~tokenloom.format.reader.IndexFile`),
  digested from the same bytes, its ``.bin`` checked by ``stat`` only, and it becomes a
  lazy dataset whose sections are already parsed. Anything unusual (a large, recent or
  changing file, a missing or short ``.bin``) opens it in full, which reports problems
  as usual; a fully opened prefix is wrapped in a lazy dataset when its facts could be
  recorded, so that :meth:`Startup.release` can close it after the build;
* :meth:`Startup.warm_start`: for each lazy dataset, a
  :class:`~tokenloom.builder.warm_keys.PrefixWarmStart` handed to its ``GPTDataset``s:
  their cache key written directly from the known facts (the same text as the full
  description, which the tests compare) and the sample count the memo recorded for
  that key, so that loading the indices waits for their first use;
* :meth:`Startup.finish`: records the datasets' lengths and saves the memo.

Everything here is an optimisation: with no memo, or a miss, datasets are opened and
keyed in full.
"""

from __future__ import annotations

import inspect
import os
import stat as stat_module
from collections.abc import Iterable
from typing import Optional, SupportsInt, Union

from tokenloom.builder.memo import StartupMemo, memo_path, recordable
from tokenloom.builder.warm_keys import BuildMiddles, PrefixWarmStart, identity_json
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.datasets.gpt import GPTDataset
from tokenloom.format import DType, IndexedDataset, LazyIndexedDataset, PairFacts
from tokenloom.format.identity import DIGEST_NAME, idx_digest, stat_key
from tokenloom.format.index_file import IndexFile

__all__ = [
    "SMALL_IDX_BYTES",
    "PrefixWarmStart",
    "Startup",
    "accepts_start_keywords",
    "identity_json",
]

SMALL_IDX_BYTES = 1 << 20
"""``.idx`` files up to this size are read whole (larger ones are memory-mapped)."""


def accepts_start_keywords(cls: type) -> bool:
    """Whether ``cls(...)`` takes the ``index_cache`` and ``warm_start`` keywords."""
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return "index_cache" in parameters and "warm_start" in parameters


class Startup:
    """The start-up shortcut of one build (see the module docstring)."""

    def __init__(self, memo: StartupMemo, config: GPTDatasetConfig, exact_gpt: bool) -> None:
        self.memo, self.config, self.exact_gpt = memo, config, exact_gpt
        self._middles = BuildMiddles()

    @classmethod
    def for_blend(
        cls, dataset_class: type, config: object, prefixes: list[str]
    ) -> Optional[Startup]:
        """The shortcut for ``prefixes`` built as ``dataset_class``, or None where none
        applies (no ``path_to_cache``, mock data, object storage, or a class that
        opens its own low-level data)."""
        if (
            not isinstance(config, GPTDatasetConfig)
            or not config.path_to_cache
            or config.mock
            or not (isinstance(dataset_class, type) and issubclass(dataset_class, GPTDataset))
            or dataset_class.build_low_level_dataset is not GPTDataset.build_low_level_dataset
            or dataset_class.numel_low_level_dataset is not GPTDataset.numel_low_level_dataset
            or any(p is None or str(p).startswith(("s3://", "msc://")) for p in prefixes)
        ):
            return None
        absolute = {p: _absolute(p) for p in prefixes}
        path = memo_path(
            config.path_to_cache, dataset_class.__name__, absolute.values(), absolute=True
        )
        return cls(StartupMemo.load(path, absolute), config, dataset_class is GPTDataset)

    def _lazy(
        self,
        facts: PairFacts,
        index: Optional[IndexFile] = None,
        opened: Optional[IndexedDataset] = None,
    ) -> LazyIndexedDataset:
        return LazyIndexedDataset(
            facts,
            mmap=self.config.mmap_bin_files,
            fast_cache_load=self.config.fast_cache_load,
            index=index,
            opened=opened,
        )

    def known(self, prefix: str) -> Optional[LazyIndexedDataset]:
        """A lazy dataset for ``prefix`` when the memo vouches for it (and agrees with
        ``sequences_per_dataset``), else None."""
        facts = self.memo.facts(prefix)
        if facts is None:
            return None
        given = self.config.sequences_for(prefix)
        if given is not None and (int(given[0]), int(given[1])) != (
            facts.sequence_count,
            facts.document_count,
        ):
            return None  # let IndexedDataset report the stale counts
        return self._lazy(facts)

    def open(
        self, dataset_class: type[GPTDataset], prefix: str
    ) -> Union[IndexedDataset, LazyIndexedDataset]:
        """``dataset_class.build_low_level_dataset(prefix, config)``, recording its facts
        (a small ``.idx`` is read in one call and the ``.bin`` left for later)."""
        light = self._open_small(prefix)
        if light is not None:
            return light
        try:
            before = os.stat(prefix + ".idx")
        except OSError:
            before = None  # opening reports the missing file
        dataset = dataset_class.build_low_level_dataset(prefix, self.config)
        facts = None if before is None else self._opened_facts(prefix, before, dataset)
        if facts is None:
            return dataset
        self.memo.record_facts(facts)
        return self._lazy(facts, opened=dataset)

    def _opened_facts(
        self, prefix: str, before: os.stat_result, dataset: IndexedDataset
    ) -> Optional[PairFacts]:
        """The facts of an opened dataset whose ``.idx`` had ``before`` when opened; None
        when it changed meanwhile or is too recent to be told apart by its stat."""
        path = os.path.abspath(prefix + ".idx")
        identity = dataset.file_identity()
        try:
            after = os.stat(path)
        except OSError:
            return None
        if (
            identity is None
            or stat_key(after) != stat_key(before)
            or not recordable(after)
            or identity["idx"]["size"] != after.st_size
            or identity["idx"]["mtime_ns"] != after.st_mtime_ns
        ):
            return None
        bin_ = identity["bin"]
        return PairFacts(
            prefix,
            path,
            stat_key(after),
            DType.code_from_dtype(dataset.dtype),
            len(dataset),
            int(dataset.document_indices.shape[0]),
            str(identity["idx"][DIGEST_NAME]),
            _identity_int(bin_["size"]),
            _identity_int(bin_["mtime_ns"]),
        )

    def _open_small(self, prefix: str) -> Optional[LazyIndexedDataset]:
        """A lazy dataset with its ``.idx`` parsed, recorded in the memo; None when the
        prefix must be opened in full (see the module docstring)."""
        path = os.path.abspath(prefix + ".idx")
        read = _read_small(path)
        if read is None:
            return None
        data, idx_stat = read
        if not recordable(idx_stat):
            return None
        try:
            bin_stat = os.stat(prefix + ".bin")
        except OSError:
            return None
        if not stat_module.S_ISREG(bin_stat.st_mode):
            return None
        index = IndexFile(
            path,
            False,
            self.config.sequences_for(prefix),
            None,
            check_documents=not self.config.fast_cache_load,
            data=data,
        )
        header = index.header
        if header.sequence_count and bin_stat.st_size < int(index.pointers[-1]) + int(
            index.lengths[-1]
        ) * DType.size(header.dtype):
            return None  # a short .bin: the full open names it
        facts = PairFacts(
            prefix,
            path,
            stat_key(idx_stat),
            DType.code_from_dtype(header.dtype),
            header.sequence_count,
            header.document_count,
            idx_digest(path, idx_stat, data),
            bin_stat.st_size,
            bin_stat.st_mtime_ns,
        )
        self.memo.record_facts(facts)
        return self._lazy(facts, index=index)

    def warm_start(self, low_level: object) -> Optional[PrefixWarmStart]:
        """What the GPT datasets of ``low_level`` can take from the facts, when known."""
        if not isinstance(low_level, LazyIndexedDataset):
            return None
        return PrefixWarmStart(low_level.facts, self.memo, self.exact_gpt, self._middles)

    @staticmethod
    def release(low_level: object) -> None:
        """After the splits of ``low_level`` are built: close its files when it is a lazy
        dataset (a blend reads few prefixes soon; they reopen on use)."""
        if isinstance(low_level, LazyIndexedDataset):
            low_level.release()

    def finish(self, datasets: Iterable[object]) -> None:
        """Record the length of every dataset whose cached indices are loaded; save."""
        for dataset in datasets:
            if (
                isinstance(dataset, GPTDataset)
                and dataset.cache_key is not None
                and dataset.indices_loaded
            ):
                self.memo.record_length(dataset.cache_key.stem, len(dataset))
        self.memo.save()


def _absolute(path: str) -> str:
    """``os.path.abspath(path)``; a ``str`` that is already absolute and normal (no
    ``//``, no component starting with ``.``, no trailing ``/``) is its own, unchanged."""
    if type(path) is str and path[:1] == "/" and "//" not in path and "/." not in path:
        if not path.endswith("/"):
            return path
    return os.path.abspath(path)


def _identity_int(value: object) -> int:
    """``int(value)`` of a size or mtime of a file identity (``os.stat`` gives ints)."""
    if not isinstance(value, SupportsInt):
        raise TypeError(f"file identity field {value!r} is not an integer")
    return int(value)


def _read_small(path: str) -> Optional[tuple[bytes, os.stat_result]]:
    """``(bytes, stat)`` of ``path`` when it is a small regular file, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
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
    if len(data) != before.st_size or stat_key(after) != stat_key(before):
        return None  # changing while read
    return data, after
