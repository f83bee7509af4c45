"""Crafted JSON files for the untrusted-file tests (issue 18, classes 5-7), and a runner
that bounds a subprocess's memory so that an unbounded read fails fast instead of
eating the machine.

Kinds of crafted file:

- ``deep``: 100,000 nested arrays (valid prefix of JSON, far past the recursion limit);
- ``deep_closed``: the same, closed (valid JSON);
- ``zero``: a symlink to ``/dev/zero`` (size 0 by ``stat``, endless to read);
- ``huge``: a sparse regular file of one TiB (a read of it all cannot succeed).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Optional

DEEP = 100_000
REPOSITORY = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 2 << 30  # address space of a bounded subprocess


def deep_json(levels: int = DEEP, closed: bool = False) -> bytes:
    """``levels`` nested arrays, closed or not."""
    return b"[" * levels + (b"]" * levels if closed else b"")


def plant(path, kind: str) -> Path:
    """Put a crafted file of ``kind`` at ``path`` (replacing what is there)."""
    path = Path(path)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "deep":
        path.write_bytes(deep_json())
    elif kind == "deep_closed":
        path.write_bytes(deep_json(closed=True))
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(1 << 40)
    else:
        raise ValueError(kind)
    return path


def _bounded() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(argv: list[str], cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python argv...`` with its memory bounded (an unbounded read dies of
    MemoryError in seconds) and the repository importable (``tests.support``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPOSITORY), str(REPOSITORY / "src"), env.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_bounded,
    )


def run_cli(args: list[str], cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m tokenloom args...``, bounded (see :func:`run_bounded`)."""
    return run_bounded(["-m", "tokenloom", *map(str, args)], cwd, timeout)


def one_line_error(done: subprocess.CompletedProcess, command: str) -> str:
    """The single error line of a failed command (asserting there is no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"tokenloom {command}: error: "), done.stderr[-3000:]
    return lines[-1]


def craft_entry_header(path, text: bytes) -> None:
    """Give the cache entry at ``path`` the header ``text`` with a valid CRC (its data
    kept): what a deliberate, well-formed-looking edit looks like."""
    import struct
    import zlib

    from tokenloom.cache import entry as cache_file

    with open(path, "rb") as handle:
        _, start = cache_file.read_record(handle, str(path))
    data = Path(path).read_bytes()[start:]
    prefix = struct.pack("<8sQII", cache_file.MAGIC, len(text), zlib.crc32(text), 0)
    padding = -(-(len(prefix) + len(text)) // 64) * 64 - len(prefix) - len(text)
    Path(path).write_bytes(prefix + text + bytes(padding) + data)


def craft_pack_table(path, text: bytes, magic: Optional[bytes] = None) -> None:
    """Give the pack at ``path`` the table ``text`` with a valid CRC (its body kept),
    under ``magic`` (b"TLIDXP01": a version 1 JSON table) or its own."""
    import struct
    import zlib

    raw = Path(path).read_bytes()
    own, length, _, _ = struct.unpack("<8sQII", raw[:24])
    magic = own if magic is None else magic
    body = raw[-(-(24 + length) // 64) * 64 :]
    prefix = struct.pack("<8sQII", magic, len(text), zlib.crc32(text), 0)
    padding = -(-(len(prefix) + len(text)) // 64) * 64 - len(prefix) - len(text)
    Path(path).write_bytes(prefix + text + bytes(padding) + body)


def deep_inside(record: dict, name: str, levels: int = DEEP) -> bytes:
    """The JSON of ``record`` with member ``name`` nested ``levels`` deep (valid JSON
    that ``json.dumps`` itself could not write)."""
    import json

    text = json.dumps({**record, name: "@DEEP@"}, separators=(",", ":")).encode()
    return text.replace(b'"@DEEP@"', deep_json(levels, closed=True))
