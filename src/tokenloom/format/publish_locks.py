"""``flock`` locks on files that come and go: the primitives of :mod:`tokenloom.format.publish`.

``flock`` locks an *inode*, not a name.  The publish protocol locks two kinds of files
whose name can stop pointing at the inode a process locked: the directory's writer lock,
which its holder deletes when it is done, and a dataset's ``.idx``, which a publish
replaces by rename.  A process that opened the old inode and then waited would, once
the lock is granted, hold the lock of a file nobody else will ever lock again (the
classic pitfall of deleting a lock file).  So every acquisition here is *verified*: once
granted, ``fstat`` of the descriptor is compared with ``stat`` of the path, and when they
differ (or the path is gone) the descriptor is closed and the acquisition starts again.

The protocol only ever removes or replaces a locked file while it holds that file's
*exclusive* lock, so a verified lock stays the path's for as long as it is held: a
shared holder keeps every writer away from the name, and an exclusive holder has it to
itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Optional

from tokenloom.errors import PublishTimeoutError

POLL_S = 0.02
READ_ONLY_ERRORS = (errno.EACCES, errno.EROFS, errno.EPERM)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO at the path must not block the open
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class Deadline:
    """When waiting for locks must stop (one budget for a whole open or publish)."""

    timeout: float
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.at = time.monotonic() + self.timeout

    def remaining(self) -> float:
        """Seconds left (never negative)."""
        return max(0.0, self.at - time.monotonic())


def same_file(fd: int, path: str) -> bool:
    """Whether ``path`` (followed like ``open`` follows it) is still the file of ``fd``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _open(path: str, create: bool, writable: bool, nofollow: bool = False) -> Optional[int]:
    """A descriptor of the regular file ``path``; None when there is none (absent, or
    not a regular file).  ``writable`` tries read-write first (NFS emulates an exclusive
    ``flock`` with a POSIX write lock, which needs it), then read-only; ``create`` makes
    the file where it is absent and the folder is writable; ``nofollow``: a symbolic
    link at ``path`` is ``OSError(ELOOP)``, never followed (``O_CREAT`` through a link
    planted in a shared folder would create a file wherever it points)."""
    attempts = [os.O_RDWR | (os.O_CREAT if create else 0)] if writable or create else []
    attempts.append(os.O_RDONLY)
    extra = _CLOEXEC | _NONBLOCK | (_NOFOLLOW if nofollow else 0)
    for flags in attempts:
        try:
            fd = os.open(path, flags | extra, 0o666)
        except FileNotFoundError:
            if flags & os.O_CREAT:
                raise  # the folder itself is missing
            return None
        except OSError as error:
            if error.errno not in READ_ONLY_ERRORS or flags == os.O_RDONLY:
                raise
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        return None
    return None


def _flock(fd: int, exclusive: bool, path: str, deadline: Deadline) -> None:
    import fcntl

    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline.at:
                raise PublishTimeoutError(
                    f"{path}: another process has held this lock for over "
                    f"{deadline.timeout:g} s (a tokenloom writer publishing a .bin/.idx pair "
                    "in this directory, or a reader opening one); wait for it to finish or "
                    "raise TOKENLOOM_LOCK_TIMEOUT_S (a crashed process releases its locks "
                    "itself)"
                ) from None
            time.sleep(POLL_S)


def acquire(
    path: str,
    exclusive: bool,
    deadline: Deadline,
    create: bool = False,
    writable: bool = False,
    nofollow: bool = False,
) -> Optional[int]:
    """Lock ``path`` (shared or exclusive) and return the descriptor that holds the lock,
    verified to still be the path's file; None when there is no regular file to lock.

    Raises :class:`~tokenloom.errors.PublishTimeoutError` naming ``path`` at the deadline,
    and ``OSError`` when the file cannot be opened (other than being absent; with
    ``nofollow``, ``ELOOP`` for a symbolic link)."""
    while True:
        fd = _open(path, create, writable, nofollow)
        if fd is None:
            return None
        try:
            _flock(fd, exclusive, path, deadline)
        except BaseException:
            os.close(fd)
            raise
        if same_file(fd, path):
            return fd
        os.close(fd)  # removed or replaced while we waited: lock what is there now


def acquire_directory(folder: str, exclusive: bool, deadline: Deadline) -> Optional[int]:
    """Lock the directory ``folder`` itself (a descriptor that holds the lock); None where
    it cannot be opened or locked (no read permission, a filesystem without ``flock``).
    A directory is never deleted or replaced by the protocol, so nothing is verified."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError:
        return None
    try:
        _flock(fd, exclusive, folder, deadline)
    except PublishTimeoutError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    return fd


def release(fd: Optional[int], path: Optional[str] = None) -> None:
    """Release a lock; with ``path``, first delete the file (the caller holds it
    exclusively, so nobody else holds a verified lock on it)."""
    if fd is None:
        return
    if path is not None:
        with contextlib.suppress(OSError):  # a read-only folder: the file stays, harmless
            os.unlink(path)
    os.close(fd)  # closing the descriptor releases the flock


__all__ = [
    "Deadline",
    "acquire",
    "acquire_directory",
    "release",
    "same_file",
    "POLL_S",
    "READ_ONLY_ERRORS",
]
