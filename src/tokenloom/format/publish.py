"""Publish a ``.bin``/``.idx`` pair (plus sidecars) so that it changes all at once.

Two renames cannot be made atomic together, so a small journal and a lock sit beside
the pair:

* ``DIR/.tokenloom-publish.lock``: an ``flock`` lock for the directory.  Writers hold it
  exclusively while they commit (a few renames: milliseconds); readers hold it shared
  while they open the ``.idx`` and ``.bin`` of a prefix, so they never open one file of
  the old pair and one of the new.
* ``DIR/.NAME.publish-journal`` (``NAME`` = the prefix's basename): a JSON list of
  ``[temporary, final]`` renames, written atomically (temporary + fsync + rename) once
  every temporary file is complete and fsynced.  Writing it is the commit point.

A publish: take the lock, finish any earlier journal, write the journal, rename every
file into place, fsync the directory, delete the journal, release the lock.  A crash
before the journal exists leaves the old pair (and orphan temporaries named
``.NAME.*.tmp``); a crash after it leaves a journal that the next reader or writer of
that prefix rolls forward (a rename is redone only while its temporary still exists),
so the new pair appears complete.  A writer or reader that finds the lock held waits up
to ``timeout`` seconds (``TOKENLOOM_LOCK_TIMEOUT_S``, default 120), then raises
:class:`~tokenloom.errors.PublishTimeoutError` naming the lock file.

The data files themselves are untouched: their bytes are exactly what was written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Optional

from tokenloom.atomic import atomic_write_bytes, fsync_dir, fsync_path, temporary_sibling
from tokenloom.errors import FormatError, OutputError, PublishTimeoutError, TokenloomError

LOCK_NAME = ".tokenloom-publish.lock"
_JOURNAL_SUFFIX = ".publish-journal"
_JOURNAL_FORMAT = "tokenloom-publish-journal/1"
_POLL_S = 0.02
_FIRST_LOCK_GRACE_S = 0.2
_READ_ONLY_ERRORS = (errno.EACCES, errno.EROFS, errno.EPERM)


def default_timeout() -> float:
    """Seconds to wait for a publish lock (``TOKENLOOM_LOCK_TIMEOUT_S``, default 120)."""
    text = os.environ.get("TOKENLOOM_LOCK_TIMEOUT_S", "120")
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"TOKENLOOM_LOCK_TIMEOUT_S={text!r}: give a number of seconds") from None
    if not value >= 0:  # also rejects nan
        raise FormatError(f"TOKENLOOM_LOCK_TIMEOUT_S={text!r}: give a number of seconds >= 0")
    return value


def lock_path(prefix: str) -> str:
    """The directory lock that guards publishing and opening ``prefix``'s files."""
    return os.path.join(os.path.dirname(os.path.abspath(prefix)), LOCK_NAME)


def journal_path(prefix: str) -> str:
    """The journal of an unfinished publish of ``prefix`` (absent when none)."""
    folder, name = os.path.split(os.path.abspath(prefix))
    return os.path.join(folder, f".{name}{_JOURNAL_SUFFIX}")


def _open_lock(prefix: str, create: bool) -> Optional[int]:
    """A descriptor of the lock file, None where there is none (readers never create it,
    so reading a folder leaves no trace).  A writer that creates it waits
    ``_FIRST_LOCK_GRACE_S`` so that a reader which found no lock file a moment ago, and
    so opens without it, has finished opening both files before anything is renamed."""
    path, cloexec = lock_path(prefix), getattr(os, "O_CLOEXEC", 0)
    if create:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | cloexec, 0o666)
        except FileExistsError:
            pass
        else:
            time.sleep(_FIRST_LOCK_GRACE_S)
            return fd
    for flags in (os.O_RDWR, os.O_RDONLY):  # flock works on a read-only descriptor too
        try:
            return os.open(path, flags | cloexec)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno not in _READ_ONLY_ERRORS:
                raise
    return None


def _acquire(fd: int, exclusive: bool, path: str, timeout: Optional[float]) -> None:
    import fcntl

    timeout = default_timeout() if timeout is None else float(timeout)
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise PublishTimeoutError(
                    f"{path}: another process has been publishing a .bin/.idx pair in this "
                    f"directory for over {timeout:g} s; wait for it to finish or raise "
                    "TOKENLOOM_LOCK_TIMEOUT_S (a crashed writer releases the lock itself)"
                ) from None
            time.sleep(_POLL_S)


@contextlib.contextmanager
def _locked(prefix: str, exclusive: bool, timeout: Optional[float], create: bool) -> Iterator[bool]:
    """Hold the directory lock; yields False when there is no lock file to hold."""
    fd = _open_lock(prefix, create)
    if fd is None:
        yield False
        return
    try:
        _acquire(fd, exclusive, lock_path(prefix), timeout)
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _read_journal(path: str) -> list[tuple[str, str]]:
    folder = os.path.dirname(path)
    try:
        with open(path, "rb") as handle:
            record = json.loads(handle.read().decode("utf-8"))
        if record.get("format") != _JOURNAL_FORMAT:
            raise ValueError(f"format {record.get('format')!r}")
        return [
            (os.path.join(folder, tmp), os.path.join(folder, final))
            for tmp, final in record["moves"]
        ]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise FormatError(
            f"{path}: publish journal is unreadable ({error}); it was not written "
            "by tokenloom: delete it and rewrite the dataset"
        ) from None


def _roll_forward(path: str) -> bool:
    moves = _read_journal(path)
    if not moves and not os.path.exists(path):
        return False
    for tmp, final in moves:
        if os.path.lexists(tmp):
            os.replace(tmp, final)
    for folder in {os.path.dirname(final) for _, final in moves}:
        fsync_dir(os.path.join(folder, "x"))
    os.unlink(path)
    fsync_dir(path)
    return True


def recover(prefix: str, timeout: Optional[float] = None) -> bool:
    """Finish a publish of ``prefix`` that a crash interrupted; True when one was finished.

    Cheap when there is nothing to do (one ``stat``)."""
    journal = journal_path(prefix)
    if not os.path.lexists(journal):
        return False
    try:
        with _locked(prefix, True, timeout, create=True):
            return _roll_forward(journal)
    except PermissionError as error:
        raise FormatError(
            f"{journal}: a publish of {prefix} was interrupted and must be finished, "
            f"but this process cannot write there ({error.strerror}); open the "
            "dataset once with write access to repair it"
        ) from None


@contextlib.contextmanager
def reading(prefix: str, timeout: Optional[float] = None) -> Iterator[None]:
    """Open the files of ``prefix`` inside this block: never half of two publishes.

    Rolls an interrupted publish forward first.  Where no tokenloom writer ever published
    (no lock file: nothing is created by reading), or ``prefix`` is an object-storage URL,
    the block runs unlocked; a writer creating the lock waits for such readers first."""
    if "://" in str(prefix):
        yield
        return
    recover(prefix, timeout)
    with _locked(prefix, False, timeout, create=False):
        yield


def _relative(folder: str, path: str) -> str:
    path = os.path.abspath(path)
    if os.path.dirname(path) == folder:
        return os.path.basename(path)
    return path  # os.path.join(folder, absolute) gives the absolute path back


def publish_pair(
    prefix: str, moves: Sequence[tuple[str, str]], timeout: Optional[float] = None
) -> None:
    """Rename every finished ``(temporary, final)`` file into place as one publish.

    The temporaries must be complete and fsynced, and on the same filesystem as their
    final names (siblings, as :func:`~tokenloom.atomic.temporary_sibling` makes them)."""
    journal = journal_path(prefix)
    folder = os.path.dirname(journal)
    record = {
        "format": _JOURNAL_FORMAT,
        "moves": [[_relative(folder, tmp), _relative(folder, final)] for tmp, final in moves],
    }
    with _locked(prefix, True, timeout, create=True):
        _roll_forward(journal)
        try:  # the commit point; failing here leaves the old set (the caller discards)
            atomic_write_bytes(journal, json.dumps(record).encode("utf-8"))
        except OSError as error:
            raise output_error(journal, error) from None
        _roll_forward(journal)


def write_temporaries(prefix: str, extra_files: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """Write each ``suffix -> bytes`` to a fsynced temporary sibling of ``prefix + suffix``;
    returns the ``(temporary, final)`` moves (the caller removes them on failure)."""
    moves: list[tuple[str, str]] = []
    try:
        for suffix, data in extra_files.items():
            if (
                not isinstance(suffix, str)
                or not suffix
                or "/" in suffix
                or suffix in (".bin", ".idx")
            ):
                raise FormatError(
                    f"{prefix}: extra file suffix {suffix!r}: use a suffix such as "
                    "'.json' (not '.bin'/'.idx', no '/')"
                )
            final = f"{prefix}{suffix}"
            tmp = temporary_sibling(final)
            moves.append((tmp, final))
            try:
                with open(tmp, "wb") as handle:
                    handle.write(bytes(data))
                fsync_path(tmp)
            except OSError as error:  # e.g. the disk filled up at the sidecar
                if isinstance(error, TokenloomError):
                    raise
                raise output_error(final, error) from None
    except BaseException:
        discard(moves)
        raise
    return moves


def output_error(path: str, error: OSError) -> OutputError:
    """The OutputError naming ``path`` for a failed write (``errno`` kept, so that callers
    catching ``OSError`` can still test it)."""
    hint = (
        " (the disk is full: free space or write elsewhere)" if error.errno == errno.ENOSPC else ""
    )
    failure = OutputError(
        f"{path}: cannot write the output: {error.strerror or error}{hint}; nothing was published"
    )
    failure.errno = error.errno
    return failure


def discard(moves: Sequence[tuple[str, str]]) -> None:
    """Remove the temporaries of moves that were not published."""
    for tmp, _ in moves:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


__all__ = [
    "publish_pair",
    "recover",
    "reading",
    "write_temporaries",
    "discard",
    "lock_path",
    "output_error",
    "journal_path",
    "default_timeout",
    "LOCK_NAME",
]
