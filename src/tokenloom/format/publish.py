"""Publish a ``.bin``/``.idx`` pair (plus sidecars) so that it changes all at once.

Two renames cannot be made atomic together, so a journal and ``flock`` locks do it; a
finished publish leaves nothing in the folder but the files it published.

* ``DIR/.NAME.publish-journal`` (``NAME`` = the prefix's basename): a JSON list of
  ``[temporary, final]`` renames, written atomically (temporary + fsync + rename) once
  every temporary file is complete and fsynced.  Writing it is the commit point; it is
  deleted once every rename is done.  Anyone who can create a file in ``DIR`` could
  forge one, so a journal is checked whole before any rename
  (:mod:`tokenloom.format.publish_journal`): plain names of ``DIR`` only, finals that
  are the prefix's own files, temporaries named and owned as the writer makes them;
  anything else is a FormatError naming the journal and the entry.
* ``DIR/.tokenloom-publish.lock``: the writers' lock of the directory.  A writer (or a
  repair) creates it, holds it exclusively for its whole publish and deletes it while
  still holding it: it exists only while a publish runs, or after a crash in one.  It
  is never opened through a symbolic link (a writer refuses one with a FormatError; a
  reader locks the directory instead).
* ``DIR/NAME.idx`` itself: readers hold it shared while they open the ``.idx`` and the
  ``.bin``; a writer holds the ``.idx`` it replaces exclusively while it commits.
* ``DIR`` itself: a writer holds the directory exclusively while it commits; a reader
  of a prefix that has neither an ``.idx`` nor a lock file holds it shared instead.

The lock file and the ``.idx`` come and go, so every lock on them is verified once
granted (:mod:`tokenloom.format.publish_locks`): a process that waited on a lock file
which was then deleted, or on an ``.idx`` which was then replaced, sees that the path no
longer names its inode and locks again.

A publish: lock the directory's lock file; lock the current ``.idx`` (if any), then the
directory; finish any earlier journal (then lock the ``.idx`` it put in place); write
the journal; rename every file into place (the ``.bin`` before the ``.idx``); fsync the
directory; delete the journal; release the directory and the ``.idx``; delete the lock
file and release it.  A crash before the journal exists leaves the old set (and orphan
``.NAME.*.tmp`` temporaries); a crash after it leaves a journal that the next reader or
writer of that prefix rolls forward (a rename is redone only while its temporary still
exists), so the new set appears whole.  A crash may leave the lock file, which the next
writer locks, verifies and deletes.

An open (:func:`reading`): finish an interrupted publish (a journal is there: that
needs write access); take a shared lock (the ``.idx``, verified; else the lock file,
verified; else the directory); if a journal is there now, release and start again; else
run the block, which opens both files, and release.  Readers open files read-only and
never create one: reading leaves no trace, and read-only folders work.

The races, and why each ends with the old set or the new one:

* R1, two writers: the lock file serialises them.  One that waited on a lock file its
  holder then deleted finds the path gone (or another inode) and starts again.
* R2, a reader and a writer replacing an existing pair: the reader's verified shared
  lock on the current ``.idx`` excludes the writer's exclusive lock on that inode, and a
  writer renames only while it holds that.  So while the reader holds it, neither the
  ``.idx`` nor the ``.bin`` changes.  A reader that waited on an ``.idx`` that a publish
  then replaced fails the verification and locks the new one.
* R3, a writer killed at any step: its locks die with it.  Before the journal exists
  the old set is whole; after it, whichever ``.idx`` a reader then locks, the reader sees
  the journal (checked after the lock is granted) and rolls it forward first.
* R4, a reader of a prefix without an ``.idx``: while a publish runs in the directory
  the lock file exists, and the reader's shared lock on it waits for the writer, then
  fails the verification (the writer deleted it) and starts again.  Where there is no
  lock file either, the reader's shared lock on the directory keeps any writer from
  committing until the block is done.
* R5, a stopped (SIGSTOP) process holds its locks: the others wait up to ``timeout``
  seconds (``TOKENLOOM_LOCK_TIMEOUT_S``, default 120), then raise
  :class:`~tokenloom.errors.PublishTimeoutError` naming the file.
* R6, read-only folders: readers lock through read-only descriptors (``flock`` allows
  it).  A repair there waits for a writer still running, then raises FormatError
  asking for write access.

Limits: ``flock`` is advisory (megatron-core and other tools ignore it), and a directory
lock is local to one machine on NFS (file locks there are emulated with POSIX locks and
reach the server; R4 across machines is not covered).  A reader that cannot open the
``.idx`` (a FIFO, a symlink loop, no permission) runs the block unlocked: it fails there.

The data files themselves are untouched: their bytes are exactly what was written.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Optional

from tokenloom.atomic import atomic_write_bytes, fsync_dir, fsync_path, temporary_sibling
from tokenloom.errors import FormatError, OutputError, PublishTimeoutError, TokenloomError
from tokenloom.format import publish_journal
from tokenloom.format.publish_locks import (
    READ_ONLY_ERRORS,
    Deadline,
    acquire,
    acquire_directory,
    release,
)

LOCK_NAME = ".tokenloom-publish.lock"


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


def _deadline(timeout: Optional[float]) -> Deadline:
    return Deadline(default_timeout() if timeout is None else float(timeout))


def lock_path(prefix: str) -> str:
    """The directory's writer lock (present only while a publish in it runs)."""
    return os.path.join(os.path.dirname(os.path.abspath(prefix)), LOCK_NAME)


def journal_path(prefix: str) -> str:
    """The journal of an unfinished publish of ``prefix`` (absent when none)."""
    folder, name = os.path.split(os.path.abspath(prefix))
    return os.path.join(folder, publish_journal.journal_name(name))


def _index_path(prefix: str) -> str:
    return f"{os.path.abspath(prefix)}.idx"


@contextlib.contextmanager
def _directory_locked(prefix: str, deadline: Deadline) -> Iterator[Optional[int]]:
    """Hold the writer lock of ``prefix``'s directory (created, then deleted on release).

    Yields None where it can neither be created nor opened (a read-only folder
    without one: no writer runs there)."""
    path = lock_path(prefix)
    try:  # read-only: opened if it exists
        fd = acquire(path, True, deadline, create=True, nofollow=True)
    except OSError as error:
        if error.errno != errno.ELOOP or isinstance(error, TokenloomError):
            raise
        raise FormatError(
            f"{path}: the publish lock file is a symbolic link (tokenloom never makes one, "
            "and will not create a file where it points); delete it, and check who made it"
        ) from None
    try:
        yield fd
    finally:
        release(fd, path)


@contextlib.contextmanager
def _replacing(prefix: str, deadline: Deadline) -> Iterator[bool]:
    """Under the directory's writer lock: hold the current ``.idx`` and the directory
    itself exclusively, with any earlier journal of ``prefix`` rolled forward; yields
    whether there was one."""
    index, rolled = _index_path(prefix), False
    while True:
        try:
            fd = acquire(index, True, deadline, writable=True)
        except PublishTimeoutError:
            raise
        except OSError as error:
            raise output_error(index, error) from None
        try:
            folder = acquire_directory(os.path.dirname(index), True, deadline)
        except BaseException:
            release(fd)
            raise
        try:
            if not _roll_forward(prefix):
                break
        except BaseException:
            release(folder)
            release(fd)
            raise
        rolled = True
        release(folder)
        release(fd)  # the journal replaced the .idx: lock the one now in place
    try:
        yield rolled
    finally:
        release(folder)
        release(fd)


def _roll_forward(prefix: str) -> bool:
    """Carry out the journal of ``prefix``, if any (checked first: see
    :mod:`tokenloom.format.publish_journal`); True when there was one."""
    path = journal_path(prefix)
    moves = publish_journal.read(path, os.path.basename(os.path.abspath(prefix)))
    if moves is None:
        return False
    publish_journal.carry_out(path, moves)
    fsync_dir(path)
    os.unlink(path)
    fsync_dir(path)
    return True


def recover(prefix: str, timeout: Optional[float] = None) -> bool:
    """Finish a publish of ``prefix`` that a crash interrupted; True when one was finished.

    Cheap when there is nothing to do (one ``stat``)."""
    return _recover(prefix, _deadline(timeout))


def _recover(prefix: str, deadline: Deadline) -> bool:
    journal = journal_path(prefix)
    if not os.path.lexists(journal):
        return False
    try:
        with _directory_locked(prefix, deadline) as held:
            if held is None:  # a read-only folder without a running writer
                if not os.path.lexists(journal):
                    return False
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            with _replacing(prefix, deadline) as rolled:
                return rolled
    except OSError as error:
        if isinstance(error, TokenloomError) or error.errno not in READ_ONLY_ERRORS:
            raise
        raise FormatError(
            f"{journal}: a publish of {prefix} was interrupted and must be finished, "
            f"but this process cannot write there ({error.strerror}); open the "
            "dataset once with write access to repair it"
        ) from None


def _reader_lock(prefix: str, deadline: Deadline) -> Optional[int]:
    """A shared lock that keeps writers from replacing ``prefix``'s files: on its
    ``.idx``, else on the directory's lock file, else on the directory (R2, R4); None
    when the ``.idx`` cannot be opened (the block then reports why) or the directory
    cannot be locked."""
    for path in (_index_path(prefix), lock_path(prefix)):
        try:
            fd = acquire(path, False, deadline, nofollow=path.endswith(LOCK_NAME))
        except PublishTimeoutError:
            raise
        except OSError as error:
            if error.errno == errno.ELOOP and path.endswith(LOCK_NAME):
                break  # a link planted as the lock file: lock the directory instead
            return None
        if fd is not None:
            return fd
    return acquire_directory(os.path.dirname(lock_path(prefix)), False, deadline)


@contextlib.contextmanager
def reading(prefix: str, timeout: Optional[float] = None) -> Iterator[None]:
    """Open the files of ``prefix`` inside this block: never half of two publishes.

    Rolls an interrupted publish forward first.  Nothing is created by reading; an
    object-storage URL runs the block unlocked (see the module docstring, R2 to R4)."""
    if "://" in str(prefix):
        yield
        return
    deadline, journal = _deadline(timeout), journal_path(prefix)
    while True:
        _recover(prefix, deadline)
        fd = _reader_lock(prefix, deadline)
        if not os.path.lexists(journal):
            break
        release(fd)  # a publish committed meanwhile (or crashed): finish it, lock again
    try:
        yield
    finally:
        release(fd)


def publish_pair(
    prefix: str, moves: Sequence[tuple[str, str]], timeout: Optional[float] = None
) -> None:
    """Rename every finished ``(temporary, final)`` file into place as one publish.

    The temporaries must be complete and fsynced, and made by
    :func:`~tokenloom.atomic.temporary_sibling` of their final names.  The files of the
    prefix (``PREFIX.bin``, ``PREFIX.idx``, ``PREFIX`` + a sidecar suffix) change all at
    once; a final elsewhere (a ``.bin`` given another name or folder) is renamed on its
    own first.  Afterwards nothing but the published files is left in the folder."""
    journal = journal_path(prefix)
    folder, name = os.path.split(os.path.abspath(prefix))
    entries, alone = [], []
    for tmp, final in moves:
        entry = publish_journal.entry(folder, name, tmp, final)
        if entry is None:
            alone.append((tmp, final))
        else:
            entries.append(entry)
    deadline = _deadline(timeout)
    with _directory_locked(prefix, deadline):
        with _replacing(prefix, deadline):
            for tmp, final in alone:
                try:
                    os.replace(tmp, final)
                except OSError as error:
                    raise output_error(final, error) from None
                fsync_dir(final)
            try:  # the commit point; failing here leaves the old set (the caller discards)
                atomic_write_bytes(journal, publish_journal.encode(entries))
            except OSError as error:
                raise output_error(journal, error) from None
            _roll_forward(prefix)


def write_temporaries(prefix: str, extra_files: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """Write each ``suffix -> bytes`` to a fsynced temporary sibling of ``prefix + suffix``;
    returns the ``(temporary, final)`` moves (the caller removes them on failure)."""
    moves: list[tuple[str, str]] = []
    try:
        for suffix, data in extra_files.items():
            if not publish_journal.sidecar_suffix_ok(suffix):
                raise FormatError(
                    f"{prefix}: extra file suffix {suffix!r}: use one dot and then letters, "
                    "digits, '_' or '-', such as '.json' (not '.bin'/'.idx')"
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
