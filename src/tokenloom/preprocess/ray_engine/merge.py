"""The final step: shards merged in input order, or listed in a prefix-list (blend) file.

Merging appends each shard with :meth:`IndexedDatasetBuilder.add_index`, in shard
order: the ``.bin`` is a sequential copy, the ``.idx`` is rebuilt from the shards'
lengths and document indices, so the result is byte-identical to one local run.

With ``--no-merge`` the shards stay where they are and
``{OUTPUT_PREFIX}_{key}_document.prefixes`` lists them, one ``WEIGHT PREFIX`` line per
shard, the weight being the shard's token count.  That is Megatron's data-path syntax:
pass the file to Megatron with ``--data-args-path``, or load it with
:func:`read_prefix_list`, which returns the ``(prefixes, weights)`` blend of
``BlendedMegatronDatasetConfig(blend=...)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from tokenloom.atomic import atomic_write_bytes
from tokenloom.errors import PreprocessError
from tokenloom.format import IndexedDatasetBuilder, get_bin_path, get_idx_path, read_index_header
from tokenloom.provenance import merged_sidecar, read_sidecars

PREFIX_LIST_SUFFIX = ".prefixes"


@dataclass
class MergeStats:
    """What a merge copied."""

    nbytes: int = 0
    """Bytes of ``.bin`` copied (all keys)."""
    seconds: float = 0.0
    """Wall time of the merge (all keys)."""

    @property
    def gigabytes_per_second(self) -> float:
        """Copy rate in GB (10^9 bytes) per second."""
        return self.nbytes / 1e9 / self.seconds if self.seconds > 0 else 0.0


def merge_shards(
    prefixes: Sequence[str], output_prefix: str, progress: Optional[Callable[[int], None]] = None
) -> MergeStats:
    """Merge the pairs at ``prefixes`` (in order) into ``output_prefix``; publish atomically,
    with the provenance sidecar of a merge (``merged_from`` names each shard)."""
    if not prefixes:
        raise PreprocessError(f"{output_prefix}: no shards to merge")
    stats, started = MergeStats(), time.perf_counter()
    dtype = read_index_header(get_idx_path(prefixes[0])).dtype
    builder = IndexedDatasetBuilder(get_bin_path(output_prefix), dtype=dtype)
    try:
        for prefix in prefixes:
            builder.add_index(prefix, progress=progress)
            stats.nbytes += os.path.getsize(get_bin_path(prefix))
        sidecar = merged_sidecar(read_sidecars(prefixes)[0])
        builder.finalize(get_idx_path(output_prefix), extra_files=sidecar)
    except BaseException:
        builder.abort()
        raise
    stats.seconds = time.perf_counter() - started
    return stats


def prefix_list_path(output_prefix: str) -> str:
    """``{output_prefix}.prefixes`` (``output_prefix`` is a key's ``..._{key}_document``)."""
    return f"{output_prefix}{PREFIX_LIST_SUFFIX}"


def write_prefix_list(output_prefix: str, prefixes: Sequence[str], weights: Sequence[int]) -> str:
    """Write the ``WEIGHT PREFIX`` lines of the shards (absolute paths); return the file."""
    lines = [
        f"{int(weight)} {os.path.abspath(prefix)}\n" for weight, prefix in zip(weights, prefixes)
    ]
    path = prefix_list_path(output_prefix)
    atomic_write_bytes(path, "".join(lines).encode("utf-8"))
    return path


def read_prefix_list(path: str) -> tuple[list[str], list[float]]:
    """The ``(prefixes, weights)`` blend a prefix-list file describes.

    Pass it as ``blend=`` of a dataset config (all shards then form one blend, each
    weighted by its tokens), or the file itself to Megatron's ``--data-args-path``.
    """
    prefixes: list[str] = []
    weights: list[float] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            parts = line.split(None, 1)
            try:
                weight = float(parts[0])
            except ValueError:
                raise PreprocessError(
                    f"{path}:{number}: expected 'WEIGHT PREFIX', got {line.strip()!r}"
                ) from None
            if len(parts) != 2 or weight < 0:
                raise PreprocessError(
                    f"{path}:{number}: expected 'WEIGHT PREFIX' with a weight "
                    f">= 0, got {line.strip()!r}"
                )
            weights.append(weight)
            prefixes.append(parts[1].strip())
    if not prefixes:
        raise PreprocessError(f"{path}: the prefix list is empty")
    return prefixes, weights


__all__ = [
    "MergeStats",
    "merge_shards",
    "write_prefix_list",
    "read_prefix_list",
    "prefix_list_path",
    "PREFIX_LIST_SUFFIX",
]
