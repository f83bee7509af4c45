"""The distributed cold build: the mid-level datasets of a blend built by all ranks.

With ``BlendedMegatronDatasetConfig(build_on_all_ranks=True)`` (the default) and more
than one rank, the builder first checks that every rank sees global rank 0's
``path_to_cache`` (:func:`spreads`: a token file, see
:mod:`tokenloom.distributed.visibility`). When they all do, the mid-level datasets of
each blend (one job per prefix: the indices of all its splits) are built in shares
(:func:`tokenloom.distributed.spread.build_in_shares`): global rank 0 estimates each
prefix's cost (:func:`estimate_cost`) and partitions the prefixes, largest first; each
rank builds its share in ``num_dataset_builder_threads`` threads and publishes it to the
shared cache (entries and pack files are written atomically); then every rank loads the
other shares. Ranks where ``is_built_on_rank()`` is False build their share too and
get None.

When some rank does not see the folder (node-local caches, a mount missing on some
node, no ``path_to_cache``), the build falls back to the rank-0 path
(:func:`tokenloom.distributed.build_on_rank0_then_load`: rank 0 builds, each node
that cannot see its cache builds its own), with a warning naming those ranks. The
blends' top-level ``BlendedDataset`` indices (one per split, cheap) stay on the
rank-0 path.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.builder.startup import Startup
from tokenloom.cache import EntryPacker, IndexCache
from tokenloom.datasets.split import Split
from tokenloom.distributed import Communicator, get_communicator
from tokenloom.distributed.spread import build_in_shares
from tokenloom.distributed.visibility import ranks_not_seeing
from tokenloom.format import DType
from tokenloom.format.spec import HEADER_SIZE, unpack_header

__all__ = ["build_blend_in_shares", "estimate_cost", "spreads"]

logger = logging.getLogger(__name__)

Bounds = Optional[tuple[float, float]]


def spreads(config: Any, comm: Communicator, start_keywords: bool) -> bool:
    """Whether this build spreads its cold builds over the ranks (a collective when
    more than one rank and ``build_on_all_ranks``: every rank must call it)."""
    if (
        comm.world_size == 1
        or comm.all_gather is None
        or not read_attribute(config, "build_on_all_ranks", False)
        or read_attribute(config, "fast_cache_load", False)
        or not start_keywords
    ):
        return False
    directory = read_attribute(config, "path_to_cache", None)
    missing = ranks_not_seeing(comm, directory)
    if missing and comm.rank == 0 and directory:
        shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
        logger.warning(
            "build_on_all_ranks: ranks %s do not see rank 0's cache folder %s; building on "
            "rank 0 (and on each node that cannot see its cache) instead",
            shown,
            directory,
        )
    return not missing


def _header_counts(prefix: str) -> Optional[tuple[int, int]]:
    """``(sequences, tokens)`` of ``prefix`` from its ``.idx`` header and ``.bin`` size;
    None when they cannot be read (the build then reports the problem)."""
    try:
        with open(prefix + ".idx", "rb") as handle:
            header = unpack_header(handle.read(HEADER_SIZE), prefix + ".idx")
        bin_size = os.stat(prefix + ".bin").st_size
    except (OSError, ValueError):
        return None
    return int(header.sequence_count), bin_size // DType.size(header.dtype)


def estimate_cost(
    prefix: Optional[str],
    split: Sequence[Bounds],
    sizes: Sequence[Optional[int]],
    sequence_length: int,
) -> float:
    """The estimated index entries the splits of ``prefix`` write (at least 1).

    From the ``.idx`` header (one 34-byte read) and the ``.bin`` size: per split
    (``split``: its ``(begin, end)`` fractions, None for none), its sequences times the
    epochs that ``sizes`` (its samples; None: one epoch) need, for the document index
    and its shuffle, plus the samples, for the sample and shuffle indices. It orders
    the jobs of the partition and need not be exact."""
    counts = None if prefix is None or "://" in str(prefix) else _header_counts(str(prefix))
    if counts is None:
        return 1.0
    sequences, tokens = counts
    cost = 0.0
    for bounds, size in zip(split, sizes):
        if bounds is None:
            continue
        fraction = max(0.0, float(bounds[1]) - float(bounds[0]))
        split_tokens = max(1.0, tokens * fraction)
        samples = split_tokens / sequence_length if size is None else float(size)
        epochs = max(1, math.ceil(samples * sequence_length / split_tokens))
        cost += sequences * fraction * epochs + samples
    return max(1.0, cost)


def build_blend_in_shares(
    builder: Any,
    prefixes: list[str],
    split: list[Bounds],
    sizes_per_dataset: list[list[Optional[int]]],
) -> list[list[Optional[Any]]]:
    """For each split, the mid-level dataset of every prefix, built in shares by the
    ranks of ``builder`` (a ``BlendedMegatronDatasetBuilder``: its ``_construct_splits``
    builds one prefix's splits, its ``_in_threads`` runs them in its threads)."""
    cls, config = builder.cls, builder.config
    directory = str(config.path_to_cache)
    startup = Startup.for_blend(cls, config, prefixes)
    lows = [None if startup is None else startup.known(p) for p in prefixes]
    construct = builder._construct_splits

    def run(jobs: list[int]) -> list[Any]:
        if not jobs:
            return []
        with EntryPacker(directory) as packer:  # its exit publishes the queued entries
            cache = IndexCache(directory, packer=packer)
            sizes = sizes_per_dataset
            work = [
                (construct, prefixes[j], split, sizes[j], lows[j], startup, cache) for j in jobs
            ]
            if startup is not None and all(lows[j] is not None for j in jobs):
                return [job[0](*job[1:]) for job in work]
            done: list[Any] = builder._in_threads(work)
            return done

    def costs() -> list[float]:
        length = int(config.sequence_length)
        return [estimate_cost(p, split, s, length) for p, s in zip(prefixes, sizes_per_dataset)]

    what = f"the {cls.__name__} datasets of {len(prefixes)} prefixes"
    comm = builder.comm or get_communicator()
    built_here = bool(builder.is_built_on_rank())
    built = build_in_shares(comm, costs, run, len(prefixes), built_here, what)
    if built is None:
        return [[None] * len(prefixes) for _ in Split]
    per_split = [list(column) for column in zip(*built)]
    if startup is not None:
        startup.finish(d for column in per_split for d in column)
    return per_split
