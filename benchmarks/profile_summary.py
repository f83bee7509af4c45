"""Turn a cProfile run into "where the time goes": self time grouped by kind of work.

Self time (tottime) is used so nothing is counted twice: the time of ``open()`` called
from inside ``numpy.load`` counts as "open files", the header parsing around it as
"index loads (.npy)".
"""

from __future__ import annotations

import concurrent.futures
import pstats
import sysconfig
from typing import Any

# (category, test on (filename, funcname)), first match wins
CATEGORIES: list[tuple[str, Any]] = [
    ("fsync", lambda f, n: "fsync" in n),
    (
        "numba compile / cache load",
        lambda f, n: "/numba/" in f or "llvmlite" in f or "marshal.loads" in n,
    ),
    (
        "open/close files",
        lambda f, n: any(
            s in n
            for s in (
                "io.open",
                "builtins.open",
                "posix.open",
                "method 'close'",
                "posix.close",
                "__exit__' of '_io",
            )
        ),
    ),
    ("mmap", lambda f, n: "mmap" in n or f.endswith("memmap.py")),
    (
        "stat/exists",
        lambda f, n: (
            any(s in n for s in ("posix.stat", "posix.lstat", "posix.fstat", "posix.access"))
            or f.endswith("genericpath.py")
        ),
    ),
    (
        "hashing + json",
        lambda f, n: (
            "_hashlib" in n
            or "hexdigest" in n
            or "json" in f
            or "_json" in n
            or "md5" in n
            or "sha" in n.lower()
            and "hash" in n.lower()
        ),
    ),
    (
        "read bytes",
        lambda f, n: any(s in n for s in ("method 'read", "readinto", "fromfile", "frombuffer")),
    ),
    (
        "index loads (.npy)",
        lambda f, n: (
            "numpy/lib/format" in f
            or "_format_impl" in f
            or "npyio" in f
            or "builtins.compile" in n
            or f.endswith("/ast.py")
        ),
    ),
    (
        "blend/sample kernels",
        lambda f, n: (
            "helpers_cpp" in n
            or "build_blending" in n
            or "build_sample_idx" in n
            or "tokenloom/index" in f
        ),
    ),
    ("numpy other", lambda f, n: "numpy" in f or "numpy" in n),
    (
        "threads/locks/dist",
        lambda f, n: (
            "threading" in f or "concurrent" in f or "acquire" in n or "torch/distributed" in f
        ),
    ),
    ("logging", lambda f, n: "logging" in f),
]


def summarise(profiler, top: int = 12) -> dict[str, Any]:
    """Grouped self time, plus the top functions by self time and by cumulative time."""
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    groups: dict[str, float] = {}
    total = 0.0
    rows = []
    for (filename, line, name), (_, ncalls, tt, ct, _) in stats.items():
        total += tt
        label = _label(filename, name)
        groups[label] = groups.get(label, 0.0) + tt
        rows.append((tt, ct, ncalls, _short(filename, line, name)))
    by_self = sorted(rows, reverse=True)[:top]
    # library functions by cumulative time, minus the outer wrappers (> 80 % of the run)
    ours = [
        r
        for r in rows
        if any(k in r[3] for k in ("megatron/", "tokenloom/")) and r[1] < 0.8 * total
    ]
    by_cum = sorted(ours, key=lambda r: r[1], reverse=True)[:top]
    return {
        "total_s": total,
        "groups": dict(sorted(groups.items(), key=lambda kv: -kv[1])),
        "top_self": [dict(self_s=r[0], cum_s=r[1], calls=r[2], func=r[3]) for r in by_self],
        "top_cumulative": [dict(self_s=r[0], cum_s=r[1], calls=r[2], func=r[3]) for r in by_cum],
    }


def _label(filename: str, name: str) -> str:
    for label, test in CATEGORIES:
        if test(filename, name):
            return label
    for lib in ("tokenloom/", "megatron/core/"):
        if lib in filename:  # the library's own Python, per module
            return filename.split(lib, 1)[1].replace("/", ".").removesuffix(".py") + " (self)"
    return "python (other)"


def _short(filename: str, line: int, name: str) -> str:
    """``file:line(name)`` with the machine's own folders left out (site-packages, the
    checkout's src/, the standard library's folder as ``stdlib/``)."""
    for marker in ("site-packages/", "src/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
    stdlib = sysconfig.get_paths()["stdlib"].rstrip("/") + "/"
    if filename.startswith(stdlib):
        filename = "stdlib/" + filename[len(stdlib) :]
    return f"{filename}:{line}({name})" if filename != "~" else name


class InlineExecutor(concurrent.futures.Executor):
    """A ThreadPoolExecutor stand-in that runs each task at submit time, in this thread."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: BLE001 - delivered through the future
            future.set_exception(error)
        return future


def inline_thread_pool() -> None:
    """Make ``ThreadPoolExecutor`` inline for modules imported (or re-read) after this."""
    concurrent.futures.ThreadPoolExecutor = InlineExecutor
    import sys

    for module in list(sys.modules.values()):
        if getattr(module, "ThreadPoolExecutor", None) is not None and getattr(
            module, "__name__", ""
        ).startswith(("megatron", "tokenloom")):
            module.ThreadPoolExecutor = InlineExecutor
