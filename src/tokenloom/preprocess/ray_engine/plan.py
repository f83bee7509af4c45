"""Cut the inputs of a preprocess run into shards, in a fixed order (no Ray needed here).

The order of the output is the order of the inputs (``expand_inputs``: the patterns as
given, each glob sorted) and, inside a file, the order of its lines.  The plan keeps it:

1. Each uncompressed JSONL file is cut into ``k = round(size * N / total)`` byte ranges
   (at least one), at the line boundary at or after ``i * size / k``; compressed and
   Parquet files cannot be cut and stay whole.
2. Runs of consecutive whole files are then grouped while a group stays within
   ``total / N`` bytes; every other piece is a shard of its own.
3. Shards are numbered in that order; merging them in number order gives the same
   documents, in the same order, as one local run over the same inputs.

So ``N`` is a target: a single uncompressed file with enough lines gives exactly ``N``
shards; many small files give fewer (grouped), a few large compressed ones may give
fewer or more.  The plan depends only on the inputs and ``N``, never on the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from tokenloom.errors import PreprocessError
from tokenloom.preprocess.inputs import detect_compression

_SCAN_BLOCK = 1 << 16


@dataclass(frozen=True)
class Piece:
    """A byte range of one input file, as seen when the plan was made."""

    path: str
    """Absolute path of the input file."""
    start: int
    """First byte (a line start)."""
    end: int
    """One past the last byte (a line start, or the file's size)."""
    size: int
    """Size of the whole file in bytes."""
    mtime_ns: int
    """Modification time of the file (``st_mtime_ns``)."""

    @property
    def whole(self) -> bool:
        """True when the piece is the entire file."""
        return self.start == 0 and self.end == self.size

    def identity(self) -> dict:
        """What a completion marker records of this piece."""
        return {
            "path": self.path,
            "start": self.start,
            "end": self.end,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
        }


@dataclass(frozen=True)
class Shard:
    """One Ray task's input: either one byte range of a file, or several whole files."""

    index: int
    """Position in the output order, 0-based."""
    count: int
    """Number of shards in the plan."""
    pieces: tuple[Piece, ...]
    """The input pieces, in order (several only when all of them are whole files)."""

    @property
    def name(self) -> str:
        """``shard-00003-of-00008``: the stem of the shard's files."""
        return f"shard-{self.index:05d}-of-{self.count:05d}"

    @property
    def nbytes(self) -> int:
        """Input bytes on disk."""
        return sum(piece.end - piece.start for piece in self.pieces)

    @property
    def is_range(self) -> bool:
        """True when the shard is part of a file (not whole files)."""
        return len(self.pieces) == 1 and not self.pieces[0].whole

    def describe(self) -> str:
        """E.g. ``a.jsonl[0:1048576]`` or ``a.jsonl, b.jsonl``."""
        if self.is_range:
            piece = self.pieces[0]
            return f"{os.path.basename(piece.path)}[{piece.start}:{piece.end}]"
        names = [os.path.basename(piece.path) for piece in self.pieces]
        return ", ".join(names[:3]) + (f" (+{len(names) - 3} files)" if len(names) > 3 else "")


def splittable(path: str) -> bool:
    """Whether a file can be cut at line boundaries (uncompressed, not Parquet)."""
    if detect_compression(path) != "none":
        return False
    with open(path, "rb") as handle:
        return handle.read(4) != b"PAR1"


def next_line_start(handle, offset: int, size: int) -> int:
    """The smallest position ``p >= offset`` that starts a line (or ``size``)."""
    if offset <= 0:
        return 0
    handle.seek(offset - 1)
    position = offset - 1
    while position < size:
        block = handle.read(_SCAN_BLOCK)
        if not block:
            break
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)
    return size


def _cut_file(path: str, size: int, mtime_ns: int, parts: int) -> list[Piece]:
    if parts <= 1 or size == 0:
        return [Piece(path, 0, size, size, mtime_ns)]
    cuts = [0]
    with open(path, "rb") as handle:
        for i in range(1, parts):
            cut = next_line_start(handle, i * size // parts, size)
            if cut > cuts[-1] and cut < size:
                cuts.append(cut)
    cuts.append(size)
    return [Piece(path, a, b, size, mtime_ns) for a, b in zip(cuts, cuts[1:])]


def _pieces(paths: Sequence[str], num_shards: int) -> list[Piece]:
    stats = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as error:
            raise PreprocessError(f"--input {path}: cannot read it ({error})") from error
        stats.append((os.path.abspath(path), st.st_size, st.st_mtime_ns))
    total = sum(size for _, size, _ in stats) or 1
    pieces: list[Piece] = []
    for path, size, mtime_ns in stats:
        parts = max(1, round(size * num_shards / total)) if splittable(path) else 1
        pieces.extend(_cut_file(path, size, mtime_ns, parts))
    return pieces


def plan_shards(paths: Sequence[str], num_shards: int) -> list[Shard]:
    """The shards of ``paths`` (already expanded, in input order) for a target of ``num_shards``."""
    if int(num_shards) < 1:
        raise PreprocessError(f"--num-shards {num_shards}: use 1 or more")
    pieces = _pieces(paths, int(num_shards))
    target = max(1, sum(p.end - p.start for p in pieces) // int(num_shards))
    groups: list[list[Piece]] = []
    for piece in pieces:
        last = groups[-1] if groups else None
        if (
            piece.whole
            and last is not None
            and all(p.whole for p in last)
            and sum(p.size for p in last) + piece.size <= target
        ):
            last.append(piece)
        else:
            groups.append([piece])
    return [Shard(i, len(groups), tuple(group)) for i, group in enumerate(groups)]


__all__ = ["Piece", "Shard", "plan_shards", "splittable", "next_line_start"]
