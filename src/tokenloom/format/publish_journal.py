"""The journal of a publish: the renames a writer commits to, checked before any is redone.

``DIR/.NAME.publish-journal`` lists ``[temporary, final]`` renames that every later
reader or writer of the prefix ``NAME`` carries out (:mod:`tokenloom.format.publish`).
So it is an instruction that anybody able to create a file in ``DIR`` could forge, and
that runs with the rights of whoever opens the dataset next.  A journal is carried out
only when each of its entries is one that tokenloom's writer makes:

* both sides are plain names in the journal's own directory (no ``/``, no ``..``, no
  NUL): nothing outside ``DIR`` is renamed or replaced;
* the final name is one of ``NAME``'s own files: ``NAME.bin``, ``NAME.idx`` or ``NAME``
  plus a one-dot sidecar suffix (``.json``), never another prefix's file;
* the temporary is named as :func:`~tokenloom.atomic.temporary_sibling` names the
  temporaries of that final (``.FINAL.RANDOM.tmp``), so no other file of the folder
  can be moved onto a dataset;
* the journal is a regular file, not a symbolic link; every temporary still present is
  a regular file (not a symbolic link, a directory or a second hard link of another
  file) owned by the journal's owner (one writer process made both);
* a final that exists is not a directory; in a sticky directory (``/tmp``-like shared
  folders, where only a file's owner may replace it) it is owned by the journal's owner
  (or the journal's owner owns the directory, or is root): the kernel would have let
  the journal's author make that rename itself, so a repair grants nobody new rights.

Anything else raises :class:`~tokenloom.errors.FormatError` naming the journal and the
entry before any rename.  After each rename the final name is checked to hold the very
file that was checked (a temporary swapped between the check and the rename is removed
again and reported).

:func:`entry` is the writer's side of the same rule: the relative names it journals, or
None for a file outside the prefix's names (a ``.bin`` given another name or folder),
which the writer renames on its own before the journal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from tokenloom.errors import FormatError, UntrustedFileError
from tokenloom.untrusted_json import loads_json

JOURNAL_SUFFIX = ".publish-journal"
JOURNAL_FORMAT = "tokenloom-publish-journal/1"
MAX_BYTES = 1 << 20
MAX_MOVES = 1024
_SIDECAR_SUFFIX = re.compile(r"\.[A-Za-z0-9_-]+")
_RANDOM = re.compile(r"[A-Za-z0-9_]{1,64}")
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def journal_name(name: str) -> str:
    """The journal's file name for the prefix basename ``name``."""
    return f".{name}{JOURNAL_SUFFIX}"


def sidecar_suffix_ok(suffix: object) -> bool:
    """Whether ``suffix`` may name a file published with a pair: one dot, then letters,
    digits, ``_`` or ``-`` (``.json``), and not ``.bin``/``.idx`` (so ``NAME + suffix``
    is never another prefix's file)."""
    return (
        isinstance(suffix, str)
        and _SIDECAR_SUFFIX.fullmatch(suffix) is not None
        and suffix not in (".bin", ".idx")
    )


def _is_plain(name: object) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\0" not in name
        and (os.altsep is None or os.altsep not in name)
    )


def _owned_by_prefix(name: str, final: str) -> bool:
    return final in (f"{name}.bin", f"{name}.idx") or (
        final.startswith(name) and sidecar_suffix_ok(final[len(name) :])
    )


def _temporary_of(tmp: str, final: str) -> bool:
    head, tail = f".{final}.", ".tmp"
    if not (tmp.startswith(head) and tmp.endswith(tail)):
        return False
    return _RANDOM.fullmatch(tmp[len(head) : len(tmp) - len(tail)]) is not None


def _problem(name: str, tmp: object, final: object) -> Optional[str]:
    """Why ``[tmp, final]`` is no entry the writer of prefix ``name`` makes (None: it is)."""
    if not (_is_plain(tmp) and _is_plain(final)):
        return "a side is not a plain file name in the journal's own directory"
    if not _owned_by_prefix(name, str(final)):
        return f"{final!r} is not a file of the prefix {name!r}"
    if not _temporary_of(str(tmp), str(final)):
        return f"{tmp!r} is not named like a temporary of {final!r}"
    return None


def entry(folder: str, name: str, tmp: str, final: str) -> Optional[list[str]]:
    """The journal entry (relative names) of the writer's move ``tmp -> final`` for the
    prefix ``folder/name``; None when ``final`` is not one of the prefix's files (the
    caller renames it alone). FormatError when it is, but ``tmp`` is not a temporary of it."""
    tmp, final = os.path.abspath(tmp), os.path.abspath(final)
    if os.path.dirname(final) != folder or not _owned_by_prefix(name, os.path.basename(final)):
        return None
    relative = [os.path.basename(tmp), os.path.basename(final)]
    if os.path.dirname(tmp) != folder or _problem(name, *relative) is not None:
        raise FormatError(
            f"{tmp}: cannot publish it as {final}: make the temporary with "
            "tokenloom.atomic.temporary_sibling(final) (a sibling named '.FINAL.*.tmp')"
        )
    return relative


def encode(entries: Sequence[Sequence[str]]) -> bytes:
    """The bytes of a journal holding ``entries`` (from :func:`entry`)."""
    record = {"format": JOURNAL_FORMAT, "moves": [list(pair) for pair in entries]}
    return json.dumps(record).encode("utf-8")


@dataclass(frozen=True)
class Move:
    """One checked rename: ``tmp`` (absent when already done, then ``inode`` is None)."""

    tmp: str
    final: str
    inode: Optional[tuple[int, int]]


def _refuse(path: str, index: int, pair: object, why: str) -> FormatError:
    shown = repr(pair)
    shown = shown if len(shown) <= 300 else shown[:300] + "..."
    return FormatError(
        f"{path}: publish journal entry {index} {shown} is refused ({why}); nothing was "
        "renamed. tokenloom's writer never writes such an entry: delete the journal (and "
        "check who wrote it), then rewrite the dataset if it is incomplete"
    )


def _load(path: str) -> Optional[tuple[object, os.stat_result]]:
    """``(parsed journal, its fstat)``, None when absent; FormatError when it is not a
    regular file (a symbolic link, a FIFO) or is too large."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise FormatError(
            f"{path}: publish journal is not a regular file (a symbolic link); tokenloom "
            "writes journals as plain files: delete it (and check who made it)"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _unreadable(path, "not a regular file")
        chunks: list[bytes] = []
        while sum(map(len, chunks)) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - sum(map(len, chunks)))
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    try:  # bounded: too large, too deep or not JSON is unreadable
        return loads_json(data, source=path, what="publish journal", max_depth=8), info
    except UntrustedFileError as error:
        raise _unreadable(path, error.problem or str(error)) from None


def _unreadable(path: str, why: str) -> FormatError:
    return FormatError(
        f"{path}: publish journal is unreadable ({why}); it was not written "
        "by tokenloom: delete it and rewrite the dataset"
    )


def _pairs(path: str, record: object) -> list[object]:
    if not isinstance(record, dict) or record.get("format") != JOURNAL_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise _unreadable(path, f"format {found!r}"[:120])
    pairs = record.get("moves")
    if not isinstance(pairs, list) or len(pairs) > MAX_MOVES:
        raise _unreadable(path, f"'moves' is not a list of at most {MAX_MOVES} entries")
    return pairs


def _checked(path: str, info: os.stat_result, index: int, pair: object, name: str) -> Move:
    folder = os.path.dirname(path)
    if not isinstance(pair, list) or len(pair) != 2:
        raise _refuse(path, index, pair, "not a [temporary, final] pair")
    why = _problem(name, pair[0], pair[1])
    if why is not None:
        raise _refuse(path, index, pair, why)
    tmp, final = os.path.join(folder, pair[0]), os.path.join(folder, pair[1])
    try:
        source = os.lstat(tmp)
    except FileNotFoundError:
        return Move(tmp, final, None)  # renamed already, before an interruption
    if not stat.S_ISREG(source.st_mode) or source.st_nlink > 1:
        raise _refuse(path, index, pair, "the temporary is not a plain file of its own")
    if source.st_uid != info.st_uid:
        raise _refuse(path, index, pair, "the temporary and the journal have other owners")
    _check_final(path, info, index, pair, final)
    return Move(tmp, final, (source.st_dev, source.st_ino))


def _check_final(path: str, info: os.stat_result, index: int, pair: object, final: str) -> None:
    try:
        target = os.lstat(final)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(target.st_mode):
        raise _refuse(path, index, pair, "the final name is a directory")
    folder = os.stat(os.path.dirname(final))
    if (
        folder.st_mode & stat.S_ISVTX
        and info.st_uid not in (0, folder.st_uid)
        and target.st_uid != info.st_uid
    ):
        raise _refuse(
            path, index, pair, "in this sticky directory only the final file's owner may replace it"
        )


def read(path: str, name: str) -> Optional[list[Move]]:
    """The checked moves of the journal at ``path`` of the prefix basename ``name``;
    None when there is no journal. FormatError naming the journal (and the entry) when
    it is unreadable or any entry is refused (see the module docstring)."""
    loaded = _load(path)
    if loaded is None:
        return None
    record, info = loaded
    pairs = _pairs(path, record)
    return [_checked(path, info, index, pair, name) for index, pair in enumerate(pairs)]


def carry_out(path: str, moves: Sequence[Move]) -> None:
    """Redo every checked rename whose temporary is still there (journal at ``path``)."""
    for move in moves:
        if move.inode is None or not os.path.lexists(move.tmp):
            continue
        os.replace(move.tmp, move.final)
        now = os.lstat(move.final)  # the inode checked, still a plain file of its own
        if (
            (now.st_dev, now.st_ino) != move.inode
            or not stat.S_ISREG(now.st_mode)
            or now.st_nlink > 1
        ):
            os.unlink(move.final)
            raise FormatError(
                f"{path}: {move.tmp} was replaced between its check and its rename to "
                f"{move.final}; the replacement was removed. Delete the journal (and check "
                "who is changing this folder), then rewrite the dataset"
            )


__all__ = [
    "JOURNAL_FORMAT",
    "JOURNAL_SUFFIX",
    "MAX_MOVES",
    "Move",
    "carry_out",
    "encode",
    "entry",
    "journal_name",
    "read",
    "sidecar_suffix_ok",
]
