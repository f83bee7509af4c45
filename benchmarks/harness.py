"""Process harness: run one measured side in its own subprocess and read its peak RSS.

Every measurement (one side of one benchmark case) runs in a fresh child process
started with ``worker.py``. The parent reaps the child with ``os.wait4`` and takes
``ru_maxrss`` from that child's own resource usage, so tokenloom and megatron-core
never share a heap and each peak belongs to exactly one measurement.

The child reports, as JSON, whatever its side function returned plus the RSS
high-water mark it had after its imports (``rss_base_mib``), so that the report can
show both the absolute peak and the peak *above* the imports (torch + megatron-core
alone weigh a few hundred MiB; tokenloom + numba much less).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"


def _maxrss_mib(ru_maxrss_kib: int) -> float:
    """ru_maxrss is in KiB on Linux."""
    return round(ru_maxrss_kib / 1024.0, 1)


def self_maxrss_mib() -> float:
    """The RSS high-water mark of the calling process, in MiB."""
    return _maxrss_mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def run_side(target: str, params: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``module:function(params)`` in a child process and return its report.

    The report is the function's dict plus ``peak_rss_mib`` (from wait4),
    ``rss_base_mib`` (after imports, as marked by the child) and ``wall_s`` (whole
    child, imports included). A child that fails returns ``{"error": ...}`` instead of
    raising, so one broken side never stops the suite.
    """
    with tempfile.TemporaryDirectory(prefix="tlbench-") as tmp:
        out_path = Path(tmp) / "result.json"
        log_path = Path(tmp) / "log.txt"
        cmd = [sys.executable, str(WORKER), target, json.dumps(params), str(out_path)]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        t0 = time.perf_counter()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            status, usage = _wait_with_timeout(proc, timeout)
        wall = time.perf_counter() - t0
        log_text = log_path.read_text(errors="replace")
        report: dict[str, Any] = {}
        if out_path.exists():
            report = json.loads(out_path.read_text())
        if status != 0 and "error" not in report:
            tail = "\n".join(log_text.strip().splitlines()[-8:])
            report["error"] = f"child exited with status {status}: {tail}"
        report["peak_rss_mib"] = _maxrss_mib(usage.ru_maxrss) if usage else None
        report["wall_s"] = round(wall, 3)
        return report


def _wait_with_timeout(proc: subprocess.Popen, timeout: float):
    """wait4 on the child; kill it (and only it) if it runs past ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return -9, usage
        time.sleep(0.01)


# --------------------------------------------------------------------------- timing


def best_of(fn: Callable[[], Any], repeats: int = 5, budget_s: float = 2.0) -> dict[str, float]:
    """Time ``fn`` up to ``repeats`` times (at least once, stop early past ``budget_s``).

    Returns min and median seconds. The minimum is the number we compare: on a
    shared machine, noise only ever adds time.
    """
    times = []
    start = time.perf_counter()
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    times.sort()
    return {"min_s": times[0], "median_s": times[len(times) // 2], "runs": len(times)}


class Probe:
    """Passed to side functions: lets them mark the RSS after their imports."""

    def __init__(self) -> None:
        self.rss_base_mib: Optional[float] = None

    def imported(self) -> None:
        """Call once the side's libraries and inputs are loaded, before the measured work."""
        self.rss_base_mib = self_maxrss_mib()


def unavailable(side: str, error: BaseException) -> dict[str, Any]:
    """The report of a side whose API is not there (yet)."""
    return {"error": f"{side} side not available yet: {type(error).__name__}: {error}"}
