"""The ``.idx`` download of a blend's remote prefixes under torch.distributed.

Object storage (:mod:`tokenloom.storage`) fetches one ``.idx`` into the local cache;
this module coordinates the ranks around it, with :mod:`tokenloom.distributed`: rank 0
first, then one download per node whose cache folder does not see rank 0's copy
(node-local cache folders work), and a failure raised on every rank.  It lives in the
builder, the one layer that knows both the storage and the ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.distributed import Communicator, build_on_rank0_then_load, get_communicator
from tokenloom.storage import (
    ObjectInfo,
    coerce_config,
    fetch_index,
    index_cache_path,
    is_fresh,
    is_remote,
    recorded_infos,
    storage_config_for,
)


def fetch_indices_on_rank0_then_others(
    idx_urls: Sequence[str], config: Any, comm: Optional[Communicator] = None
) -> list[str]:
    """:func:`tokenloom.storage.fetch_index` for every URL: rank 0 first, then every
    other rank, with one download per node; a failure raises on all ranks.

    Collective under torch.distributed: every rank must call it with the same URLs.
    """
    config = coerce_config(config)
    urls = list(idx_urls)
    seen: dict[str, ObjectInfo] = {}

    def construct() -> list[str]:
        return [fetch_index(url, config, seen.get(url)) for url in urls]

    def is_ready(payload: Any) -> bool:
        seen.update(payload or {})
        return all(
            is_fresh(index_cache_path(url, config.path_to_idx_cache), info)
            for url, info in seen.items()
        ) and len(seen) == len(urls)

    result = build_on_rank0_then_load(
        construct,
        manifest=lambda _paths: recorded_infos(config, urls),
        is_ready=is_ready,
        comm=comm,
        what=f"the .idx cache of {len(urls)} remote dataset(s)",
    )
    return result if result is not None else construct()


def prefetch_remote_indices(dataset_config: Any, comm: Optional[Communicator] = None) -> None:
    """Under torch.distributed: fetch the ``.idx`` of every remote prefix of the config on
    rank 0, then once per node, failing on every rank together (a collective: call it on
    every rank).  A no-op in one process, without remote prefixes, or with
    ``fast_cache_load`` (every rank then loads on its own)."""
    prefixes = read_attribute(dataset_config, "prefixes", None)
    remote = sorted({p for p in (prefixes() if callable(prefixes) else []) if is_remote(p)})
    if not remote or read_attribute(dataset_config, "fast_cache_load", False):
        return
    comm = comm or get_communicator()
    if comm.world_size == 1:
        return
    fetch_indices_on_rank0_then_others(
        [p + ".idx" for p in remote], storage_config_for(dataset_config), comm
    )


__all__ = ["fetch_indices_on_rank0_then_others", "prefetch_remote_indices"]
