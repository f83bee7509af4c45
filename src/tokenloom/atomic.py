"""Atomic file writes: write to a temporary sibling, fsync, then ``os.replace``.

A crash at any point leaves either the old file (or nothing) or the complete new
file under the final name, never a half-written file that later reads as valid.

``durable=False`` skips the fsyncs (file and directory) but keeps the
temporary-then-rename protocol: other processes still see the old file or the
complete new one, never a partial one. After a power loss (not a process crash) the
new name may then hold a zero-filled or short file, so it is only for files that are
validated when read and rebuildable (the index caches: sizes, headers and CRC32s are
checked on load); it saves one or two disk flushes per file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def temporary_sibling(path: str | os.PathLike) -> str:
    """Return a fresh, unique temporary name in the directory of ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; published files get the usual umask-based mode so
        # that other users and ranks can read them.
        os.fchmod(fd, 0o666 & ~_UMASK)
    except OSError:
        pass
    finally:
        os.close(fd)
    return tmp


def _create_sibling(path: str | os.PathLike) -> tuple:
    """``(name, fd)`` of a new temporary sibling of ``path``, opened for writing.

    One ``open(O_CREAT | O_EXCL)`` (mode 0666 less the umask, like a plain ``open``)
    instead of :func:`temporary_sibling`'s mkstemp, fchmod, close and a second open."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_BINARY", 0)
    )
    for attempt in range(100):
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        except FileNotFoundError:
            if attempt or not folder:
                raise
            os.makedirs(folder, exist_ok=True)
    raise FileExistsError(f"cannot create a temporary file next to {path}")


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once at import: os.umask is process-wide, so toggling it later could race
# with other threads creating files.
_UMASK = _read_umask()


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file by name (best effort on platforms without it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync the directory holding ``path`` so that a rename is durable."""
    with contextlib.suppress(OSError):
        fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def publish(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Durably move a finished temporary file to its final name."""
    fsync_path(tmp)
    os.replace(tmp, final)
    fsync_dir(final)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, durable: bool = True) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; publish it on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    ``durable=False``: no fsync (see the module docstring for when that is safe).
    """
    tmp, fd = _create_sibling(path)
    try:
        try:
            handle = open(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        with handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)  # the data was fsynced above: no second fsync of tmp
        if durable:
            fsync_dir(path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb", durable=durable) as handle:
        handle.write(data)
