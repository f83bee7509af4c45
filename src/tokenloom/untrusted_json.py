"""The one reader of JSON that tokenloom finds on disk, with a size cap and a depth cap.

Every JSON file tokenloom reads may have been crafted: provenance sidecars, the
``.etag.json`` record of the object-storage ``.idx`` cache, cache-entry headers,
start-up memos, ``--config`` files, loader states, Ray markers, publish journals.
:func:`read_json_file` and :func:`loads_json` parse them with two bounds:

- **size**: at most ``max_bytes`` bytes are read, however large the file claims (or
  does not claim) to be: ``/dev/zero`` and FIFOs report size 0, so the size is never
  taken from ``stat``. Only regular files are opened (a FIFO would block, a device
  never ends), unless the caller allows streams, which are then read bounded too.
- **depth**: the nesting of arrays and objects is measured before parsing, without
  recursion, and a document deeper than ``max_depth`` is refused. Python's parser
  recurses once per level, and so do ``json.dumps``, ``repr`` and most code that walks
  the result, so a cap far below the recursion limit keeps a ``RecursionError`` from
  escaping anywhere downstream.

Whatever is wrong (too big, too deep, not UTF-8, not JSON, not a regular file) raises
:class:`~tokenloom.errors.UntrustedFileError`, which names the file, what it is and the
limit broken. A caller that owns a cache treats it as a damaged entry and rebuilds; a
caller that reads a user's file lets it through as the error. Errors from opening the
file (``FileNotFoundError``, ``PermissionError``, ...) are left as they are, so that
"missing" keeps its own meaning.
"""

from __future__ import annotations

import json
import os
import select
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from tokenloom.errors import UntrustedFileError

#: Default size cap: far above any sidecar, memo, marker or config tokenloom writes.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: Default depth cap: tokenloom's own files nest fewer than ten levels, and 128 levels
#: leave ample room below Python's recursion limit (1000) for code walking the result.
DEFAULT_MAX_DEPTH = 128

_READ_CHUNK = 1 << 20
_QUOTE, _OPEN, _CLOSE = (ord(c) for c in '"[]')
_AS_ARRAYS = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_DEPTH_CHUNK = 1 << 22

JsonHook = Callable[[list[tuple[str, Any]]], Any]


def _fail(source: str, what: str, problem: str, hint: str) -> UntrustedFileError:
    message = f"{what} {source}: {problem}"
    if hint:
        message += f"; {hint}"
    return UntrustedFileError(message, path=source, what=what, problem=problem)


def nesting_depth(data: Union[str, bytes]) -> int:
    """How deeply the arrays and objects of JSON ``data`` nest (0 for a scalar).

    Measured without recursion and without parsing, in time linear in the length of
    ``data`` (vectorised, a few megabytes of memory at a time): brackets inside strings
    do not count, and an unclosed bracket counts as open to the end. For data that is
    not valid JSON the result is an upper bound of how deeply a parser descends before
    it fails.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"[") + raw.count(b"{") == 0:
        return 0
    if b"\\" in raw:  # drop escaped backslashes, then escaped quotes, as JSON pairs them
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # only quotes and brackets shape the nesting: keep those ({} as []), in C
    structure = raw.translate(_AS_ARRAYS, _NOT_STRUCTURE)
    quotes_before = depth = deepest = 0  # carried from chunk to chunk
    for start in range(0, len(structure), _DEPTH_CHUNK):
        size = min(_DEPTH_CHUNK, len(structure) - start)
        chunk = np.frombuffer(structure, dtype=np.uint8, count=size, offset=start)
        quotes = (chunk == _QUOTE).view(np.uint8)
        outside = np.bitwise_xor.accumulate(quotes) == (quotes_before & 1)
        opens = (chunk == _OPEN) & outside
        closes = (chunk == _CLOSE) & outside
        sums = np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)
        deepest = max(deepest, depth + int(sums.max()))
        depth += int(sums[-1])
        quotes_before += int(np.count_nonzero(quotes))
    return deepest


def _check_depth(data: Union[str, bytes], max_depth: int) -> Optional[int]:
    """The depth of ``data`` if it exceeds ``max_depth``, else None (cheaply, usually)."""
    if isinstance(data, str):
        openers = data.count("[") + data.count("{")
    else:
        openers = data.count(b"[") + data.count(b"{")
    if openers <= max_depth:  # cannot nest deeper than it has brackets
        return None
    depth = nesting_depth(data)
    return depth if depth > max_depth else None


def _decode(data: bytes, source: str, what: str, hint: str) -> tuple[str, bool]:
    """The text of ``data`` (UTF-8, or UTF-16/32 as ``json.loads`` detects them), and
    whether it was UTF-8, whose bytes can be measured for depth as they are."""
    encoding = json.detect_encoding(data)
    try:
        return data.decode(encoding), encoding.startswith("utf-8")
    except (UnicodeDecodeError, LookupError) as error:
        raise _fail(source, what, f"is not valid {encoding} text ({error})", hint) from None


def loads_json(
    data: Union[str, bytes, bytearray],
    *,
    source: str,
    what: str = "JSON file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    hint: str = "",
    object_pairs_hook: Optional[JsonHook] = None,
) -> Any:
    """Parse JSON ``data`` that came from ``source`` (a file name, or ``file:line``).

    ``what`` says what the file is (``"provenance sidecar"``), ``hint`` how to fix it;
    both go into the error. Raises :class:`UntrustedFileError` when ``data`` is longer
    than ``max_bytes`` (bytes, or characters for text), nests deeper than
    ``max_depth``, or is not JSON; never ``RecursionError`` or ``MemoryError`` from the parser.
    """
    if len(data) > max_bytes:  # bytes, or characters of text
        raise _fail(source, what, f"is larger than the limit of {max_bytes} bytes", hint)
    measured: Union[str, bytes]
    if isinstance(data, str):
        text = measured = data
    else:
        text, utf8 = _decode(bytes(data), source, what, hint)
        measured = bytes(data) if utf8 else text
    depth = _check_depth(measured, max_depth)
    if depth is not None:
        problem = f"nests {depth} levels deep, more than the limit of {max_depth}"
        raise _fail(source, what, problem, hint)
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:  # only if the caller's own stack is already nearly full
        raise _fail(source, what, "nests too deeply to parse", hint) from None
    except MemoryError:
        raise _fail(source, what, "does not fit in memory", hint) from None
    except ValueError as error:  # JSONDecodeError, and int() of a 5000-digit number
        raise _fail(source, what, f"is not valid JSON ({error})", hint) from None


def read_bounded(
    path: Union[str, os.PathLike[str]],
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allow_stream: bool = False,
    hint: str = "",
) -> bytes:
    """The bytes of the file at ``path``: at most ``max_bytes``, else an error.

    Only a regular file is read unless ``allow_stream`` (a ``--config`` given as a pipe,
    ``/dev/stdin``); a stream is read bounded too. ``os.open`` errors (missing file,
    no permission) are raised as they are.
    """
    source = str(path)
    cloexec = getattr(os, "O_CLOEXEC", 0)
    # O_NONBLOCK: opening a FIFO does not wait for a writer
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | cloexec)
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISREG(mode):
            return _read_at_most(descriptor, max_bytes, source, what, hint)
        if not allow_stream or stat.S_ISDIR(mode):
            raise _fail(source, what, "is not a regular file", hint)
        # a stream is read from this same descriptor: closing it and opening the path
        # again would drop what a writer wrote in between (a FIFO's data lives only while
        # one of its ends is open) and then wait for a writer that has come and gone
        return _read_at_most(descriptor, max_bytes, source, what, hint, wait=_waiter(descriptor))
    finally:
        os.close(descriptor)


def _waiter(descriptor: int) -> Optional[Callable[[], object]]:
    """What blocks until the non-blocking ``descriptor`` has data or its writer has hung
    up (``poll``: a FIFO opened before any writer reports no hang-up until one came), or
    None where the platform has no ``poll`` (and the descriptor blocks by itself)."""
    if not getattr(os, "O_NONBLOCK", 0):
        return None
    try:
        poller = select.poll()
    except AttributeError:  # no poll() on this platform
        return None
    poller.register(descriptor, select.POLLIN)
    return poller.poll


def _read_at_most(
    descriptor: int,
    max_bytes: int,
    source: str,
    what: str,
    hint: str,
    wait: Optional[Callable[[], object]] = None,
) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= max_bytes:
        if wait is not None:
            wait()
        try:
            chunk = os.read(descriptor, min(_READ_CHUNK, max_bytes + 1 - total))
        except BlockingIOError:  # a stream with nothing yet: wait() again
            continue
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    raise _fail(source, what, f"is larger than the limit of {max_bytes} bytes", hint)


def read_json_file(
    path: Union[str, os.PathLike[str]],
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    hint: str = "",
    allow_stream: bool = False,
    object_pairs_hook: Optional[JsonHook] = None,
) -> Any:
    """Read and parse the JSON file at ``path`` under a size cap and a depth cap.

    ``what`` names the kind of file in the error (``"provenance sidecar"``). Raises
    :class:`UntrustedFileError` for a file that is too large, too deep, not a regular
    file (unless ``allow_stream``), not UTF-8 or not JSON; ``OSError`` from opening it.
    """
    data = read_bounded(path, what=what, max_bytes=max_bytes, allow_stream=allow_stream, hint=hint)
    return loads_json(
        data,
        source=str(Path(path)),
        what=what,
        max_bytes=max_bytes,
        max_depth=max_depth,
        hint=hint,
        object_pairs_hook=object_pairs_hook,
    )


def check_nesting(
    value: object,
    *,
    source: str,
    what: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_values: int = 1_000_000,
    hint: str = "",
) -> None:
    """Refuse a value parsed by another parser (YAML) that nests deeper than
    ``max_depth``, refers to itself (YAML anchors can), or holds more than ``max_values``
    values counting repeats (an alias bomb). Walks without recursion."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > max_values:
            problem = f"holds more than {max_values} values (counting repeated aliases)"
            raise _fail(source, what, problem, hint)
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            problem = f"nests more than {max_depth} levels deep (or refers to itself)"
            raise _fail(source, what, problem, hint)
        stack.extend((child, depth + 1) for child in children)


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "check_nesting",
    "nesting_depth",
    "loads_json",
    "read_bounded",
    "read_json_file",
]
