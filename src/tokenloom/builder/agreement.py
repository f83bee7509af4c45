"""Every rank must build the same samples: compare a fingerprint before any collective.

Ranks that build different blends (or sizes, or seeds) would otherwise call different
sequences of collectives and hang (one rank in a barrier, another in an
``all_gather_object``), or, with ``random_seed`` differing, silently train on
different samples.  :func:`check_ranks_agree` gathers a small fingerprint of what
shapes the samples from every rank, once, before the build; when any rank differs,
every rank raises the same :class:`~tokenloom.errors.DistributedError` naming the
first differing field and both values.

Node-local settings (``path_to_cache`` above all: per-node cache folders must keep
working) and pure optimisations are not part of the fingerprint.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.attributes import has_attribute, read_attribute
from tokenloom.distributed.rank0 import Communicator, get_communicator
from tokenloom.errors import DistributedError

NODE_LOCAL_FIELDS = frozenset(
    {
        "path_to_cache",
        "object_storage_cache_path",
        "num_dataset_builder_threads",
        "mmap_bin_files",
        "fast_cache_load",
        "defer_npy_index_mmap",
        "sequences_per_dataset",
        "token_dtype_code",
    }
)
"""Config fields that may differ between ranks: where files live, how they are read."""

_TOKENIZER_FIELDS = ("vocab_size", "eod", "pad", "bos")


def _canonical(value: Any) -> Any:
    """A plain, comparable, picklable form of a config value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _canonical(value[key]) for key in sorted(value, key=str)}
    if has_attribute(value, "item") and callable(value.item):  # numpy scalars
        return _canonical(value.item())
    return _describe_object(value)


def _describe_object(value: Any) -> Any:
    described: dict[str, Any] = {"class": type(value).__name__}
    for name in _TOKENIZER_FIELDS:
        attribute = read_attribute(value, name, None)
        if isinstance(attribute, (bool, int, float, str)):
            described[name] = attribute
    if len(described) == 1:
        return repr(value)
    return described


def sample_fingerprint(
    config: Any, sizes: Sequence[Optional[int]], cls: type
) -> list[tuple[str, Any]]:
    """``(field, value)`` pairs of everything rank-independent that shapes the samples."""
    items: list[tuple[str, Any]] = [
        ("dataset class", cls.__name__),
        ("sizes", _canonical(list(sizes))),
    ]
    for config_field in dataclasses.fields(config):
        if config_field.name not in NODE_LOCAL_FIELDS:
            items.append((config_field.name, _canonical(getattr(config, config_field.name))))
    return items


def _first_difference(
    mine: list[tuple[str, Any]], theirs: list[tuple[str, Any]]
) -> Optional[tuple[str, Any, Any]]:
    for (name, value), (other_name, other_value) in zip(mine, theirs):
        if name != other_name:
            return name, value, f"<field {other_name}>"
        if value != other_value:
            return name, value, other_value
    if len(mine) != len(theirs):
        return "config fields", len(mine), len(theirs)
    return None


def check_ranks_agree(
    fingerprint: list[tuple[str, Any]],
    comm: Optional[Communicator] = None,
    what: str = "the datasets",
) -> None:
    """Raise on every rank when any rank's ``fingerprint`` differs from rank 0's."""
    comm = comm or get_communicator()
    if comm.world_size == 1 or comm.all_gather is None:
        return
    every = comm.all_gather(fingerprint)
    for rank, theirs in enumerate(every[1:], start=1):
        difference = _first_difference(every[0], theirs)
        if difference is not None:
            name, on_rank0, on_rank = difference
            raise DistributedError(
                f"rank {comm.rank}: the ranks would build different {what}: {name} is "
                f"{on_rank!r} on rank {rank} but {on_rank0!r} on rank 0. Every rank must pass "
                "the same config, blend, sizes and seed (only node-local settings such as "
                "path_to_cache may differ)"
            )


__all__ = ["sample_fingerprint", "check_ranks_agree", "NODE_LOCAL_FIELDS"]
