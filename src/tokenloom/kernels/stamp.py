"""Drop numba's cached machine code when any kernel source changed (a working tree).

numba's ``cache=True`` checks only the file of the function it compiled (its modification
time and size). A kernel that calls a helper from another module (``batch`` calls
``attribution``, ``rules`` and ``prefetch``; ``blend_phases`` calls ``blend_fast`` and
``blend_queue``) keeps running the old helper's machine code after that helper's file
changed, until its cache files are deleted. An install never changes its files in place,
so this only bites a working tree (an editable install): a changed kernel could pass or
fail tests on stale code.

:func:`refresh` keeps a digest of every ``*.py`` of this package in the package's own
``__pycache__`` and, when it differs, deletes the numba index and data files there
(``*.nbi``, ``*.nbc``) before anything is compiled: every kernel is then recompiled once.
``tokenloom warmup`` (and so ``scripts/test.sh``) and the test suite's start call it.
Nothing here imports numba. numba's user-wide cache (a read-only install) and
``$NUMBA_CACHE_DIR`` are left alone: files there belong to an install, whose sources
do not change.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tokenloom.atomic import atomic_write_bytes

__all__ = ["STAMP_NAME", "refresh", "source_digest"]

STAMP_NAME = "tokenloom-kernel-sources.sha256"
"""The digest file, in this package's ``__pycache__``."""

_HERE = Path(__file__).resolve().parent


def source_digest(folder: Path = _HERE) -> str:
    """sha256 over the names and bytes of every ``*.py`` file of ``folder``, sorted."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def refresh(folder: Path = _HERE) -> list[Path]:
    """Delete the stale numba cache files of ``folder``'s ``__pycache__`` when the kernel
    sources changed since the last call; return the files deleted. A no-op when the
    folder is not writable, when ``$NUMBA_CACHE_DIR`` sends the cache elsewhere, or when
    nothing changed. A file that another process deleted first is skipped."""
    cache = folder / "__pycache__"
    if os.environ.get("NUMBA_CACHE_DIR") or not os.access(folder, os.W_OK):
        return []
    digest = source_digest(folder)
    stamp = cache / STAMP_NAME
    try:
        if stamp.read_text(encoding="ascii").strip() == digest:
            return []
    except (OSError, UnicodeDecodeError):
        pass  # no stamp yet, or an unreadable one: treat as changed
    removed = []
    for pattern in ("*.nbi", "*.nbc"):
        for path in sorted(cache.glob(pattern)):
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    cache.mkdir(exist_ok=True)
    atomic_write_bytes(stamp, (digest + "\n").encode("ascii"))
    return removed
