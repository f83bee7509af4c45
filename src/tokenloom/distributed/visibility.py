"""Whether every rank sees the same folder: checked with a token file, never assumed.

:func:`ranks_not_seeing` runs two bounded exchanges (``comm.all_gather``, so a rank
that is missing is named within the timeout, see :mod:`tokenloom.distributed.collectives`):

1. global rank 0 writes a token file with a random name and content into its folder
   (atomically: one temporary file and one rename) and sends its name and content;
2. every rank reads that name in its own folder (the folder may be given differently
   per rank, a different mount of the same storage) and reports whether it holds the
   token; rank 0 then removes the file.

The result is the list of ranks that did not see it: empty when the folder is shared
by the whole job. Every rank must call it (it is a collective), with its own folder.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from tokenloom.atomic import atomic_write_bytes
from tokenloom.distributed.rank0 import Communicator

__all__ = ["TOKEN_PREFIX", "ranks_not_seeing"]

logger = logging.getLogger(__name__)

TOKEN_PREFIX = ".tokenloom-shared-"
"""Name prefix of the token file (removed by rank 0 once every rank looked)."""


def _write_token(folder: Optional[str]) -> Optional[tuple[str, str]]:
    """Rank 0: ``(name, content)`` of a new token file in ``folder``; None if it cannot."""
    if not folder:
        return None
    content = os.urandom(16).hex()
    name = TOKEN_PREFIX + content[:16]
    try:
        os.makedirs(folder, exist_ok=True)
        atomic_write_bytes(os.path.join(folder, name), content.encode(), durable=False)
    except OSError as error:
        logger.warning("cannot write a token file into %s (%s): taken as not shared", folder, error)
        return None
    return name, content


def _sees(folder: Optional[str], token: Optional[tuple[str, str]]) -> bool:
    """Whether ``folder`` holds the token file with its content."""
    if not folder or token is None:
        return False
    name, content = token
    try:
        with open(os.path.join(folder, name), "rb") as handle:
            return handle.read(len(content) + 1) == content.encode()
    except OSError:
        return False


def ranks_not_seeing(comm: Communicator, folder: Optional[str]) -> list[int]:
    """The ranks whose ``folder`` does not show rank 0's token file (see the module
    docstring); ``[]`` in a single process, and all ranks when rank 0 has no folder."""
    if comm.world_size == 1 or comm.all_gather is None:
        return []
    token = _write_token(folder) if comm.rank == 0 else None
    token = comm.all_gather(token)[0]
    try:
        seen = comm.all_gather(_sees(folder, token))
    finally:
        if comm.rank == 0 and token is not None and folder:
            try:
                os.unlink(os.path.join(folder, token[0]))
            except OSError:
                pass
    if token is None:
        return list(range(comm.world_size))
    return [rank for rank, yes in enumerate(seen) if not yes]
