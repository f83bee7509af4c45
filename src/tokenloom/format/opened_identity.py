"""The identity of a pair as an ``IndexedDataset`` opened it, and the check that an
unpickled dataset reopened the same files.

* :func:`local_bin_stat`: the ``.bin``'s ``stat`` taken at open (local pairs only);
* :func:`opened_identity`: :func:`tokenloom.format.identity.identity_of` of the mapped
  ``.idx`` bytes and the ``stat`` taken at open, without reading the files again;
* :func:`changed_since_pickled`: the FormatError to raise when a pickled dataset's files
  were regenerated or edited before it was unpickled (a DataLoader worker started after
  the parent's files changed).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Optional

from tokenloom.errors import FormatError
from tokenloom.format.identity import identity_of
from tokenloom.format.index_file import IndexFile
from tokenloom.format.spec import get_bin_path

__all__ = ["Identity", "changed_since_pickled", "local_bin_stat", "opened_identity"]

Identity = OrderedDict[str, OrderedDict[str, object]]
"""``{"idx": {...}, "bin": {...}}`` (see :mod:`tokenloom.format.identity`)."""


def local_bin_stat(path_prefix: str, object_storage_config: Any) -> Optional[os.stat_result]:
    """The ``stat`` of a local pair's ``.bin``; None for object storage, or when the
    ``.bin`` vanished since it was opened (its identity is then unknown)."""
    if object_storage_config is not None or path_prefix.startswith(("s3://", "msc://")):
        return None
    try:
        return os.stat(get_bin_path(path_prefix))
    except OSError:
        return None


def opened_identity(
    index: Optional[IndexFile], bin_stat: Optional[os.stat_result]
) -> Optional[Identity]:
    """The identity of a local pair from its open ``.idx`` (digest of the mapped bytes,
    ``stat`` at open) and its ``.bin``'s ``stat`` at open; None when one is unknown."""
    if index is None or bin_stat is None:
        return None
    stat, digest = index.stat, index.digest()
    if stat is None or digest is None:
        return None
    return identity_of(stat, digest, bin_stat)


def _describe(identity: Optional[Mapping[str, Mapping[str, object]]]) -> str:
    if identity is None:
        return "unreadable"
    return "; ".join(
        f".{part} " + ", ".join(f"{k}={v}" for k, v in fields.items())
        for part, fields in identity.items()
    )


def changed_since_pickled(
    path_prefix: str,
    pickled: Mapping[str, Any],
    current: Optional[Mapping[str, Mapping[str, object]]],
) -> Optional[FormatError]:
    """The error naming the files of ``path_prefix`` whose identity differs from the
    ``pickled`` one (``current`` None: unreadable now), or None when both are the same."""
    changed = [
        f"{path_prefix}.{part}"
        for part in ("idx", "bin")
        if current is None or current.get(part) != pickled.get(part)
    ]
    if not changed:
        return None
    return FormatError(
        f"{' and '.join(changed)} changed after this dataset was pickled (in a "
        f"DataLoader worker: after the parent opened it): the process that pickled "
        f"it read other files. Was: {_describe(pickled)}; now: "
        f"{_describe(current)}. Rebuild the datasets over the new files"
    )
