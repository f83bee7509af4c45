"""What rank 0 tells the other ranks about the caches it built, and the build's GC pause.

* :func:`cache_manifest`: the description files (commit markers) of every cache a
  build used, relative to its ``path_to_cache``;
* :func:`cache_visible`: whether another rank sees them (in its own cache folder);
* :func:`cyclic_gc_paused`: the cyclic garbage collector paused during a build.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from typing import Any, Optional

from tokenloom.attributes import read_attribute

__all__ = ["cache_manifest", "cache_visible", "cyclic_gc_paused", "walk_datasets"]


def walk_datasets(obj: Any) -> Iterator[Any]:
    """``obj`` and every dataset inside it (lists, blends' ``datasets``), depth first."""
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from walk_datasets(item)
    elif obj is not None:
        yield obj
        yield from walk_datasets(read_attribute(obj, "datasets", None))


def cache_manifest(built: Any, path_to_cache: Optional[str]) -> dict[str, Any]:
    """The description files (commit markers) of every cache ``built`` used."""
    files = []
    for dataset in walk_datasets(built):
        cache, key = (
            read_attribute(dataset, "cache", None),
            read_attribute(dataset, "cache_key", None),
        )
        if cache is not None and key is not None:
            files.append(cache.description_path(key))
    return {"path_to_cache": path_to_cache, "files": files}


def cache_visible(manifest: Optional[dict[str, Any]], path_to_cache: Optional[str]) -> bool:
    """Whether this rank sees every cache file rank 0 reported (in its own cache dir)."""
    if not manifest:
        return False
    theirs, ours = manifest["path_to_cache"], path_to_cache
    for path in manifest["files"]:
        inside = theirs and os.path.relpath(path, theirs)
        if ours and inside and not inside.startswith(os.pardir):
            path = os.path.join(ours, inside)  # its twin in this rank's cache folder
        if not os.path.isfile(path):
            return False
    return True


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while the datasets are built.

    A build over thousands of prefixes creates objects that all stay alive, so the
    collector finds nothing, but each of its full passes walks every object of the
    process (a training process holds torch's hundreds of thousands): that made start-up
    superlinear in the number of prefixes. Reference counting still frees everything as
    usual; the collector's previous state is restored afterwards, also when the build fails.

    After a build that returns, the objects the collector tracks are moved to its oldest
    generation (``gc.freeze()`` then at once ``gc.unfreeze()``, which walks no object):
    left young, every object the build made would be walked by the first young collection
    that follows (30-40 ms at 10,000 prefixes), though all stay alive. Nothing stays
    frozen; a process that froze objects itself (``gc.get_freeze_count()``) is left as it
    is. Cyclic garbage made meanwhile waits for the next full collection.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    except BaseException:
        if was_enabled:
            gc.enable()
        raise
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    if was_enabled:
        gc.enable()
