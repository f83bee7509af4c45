"""Where the sample-index and shuffle routes cross over (``index/dispatch.py``).

For each size, CPU time (``time.process_time``) of both routes taking turns in one
process with numba loaded: the cumulative-sum sample index against the one-pass kernel,
numpy's ``RandomState.shuffle`` against the shuffle kernel (int32 and int64 arrays).
Each figure is the median over ``--repeats`` interleaved rounds of a batch of calls
(the shuffles keep one generator a route: seeding costs about 0.1 ms).
Then, in fresh processes, the first kernel call's cost (numba's import and cached
machine code), which a build below the thresholds no longer pays. ``--cold-prefix P``
instead times bench_peers' tokenloom cold start-up over the corpus ``P`` in fresh
processes, old thresholds (4,096 / 8,192) and these taking turns.

    PYTHONPATH=src python benchmarks/bench_dispatch.py
    PYTHONPATH=src python benchmarks/bench_dispatch.py --cold-prefix \
        /tmp/tokenloom-bench/data/peers-20000-1000/corpus   # written by bench_peers.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy

from tokenloom.index import build_sample_index, dispatch, legacy_shuffle


def _cpu(call: Callable[[], Any], batch: int) -> float:
    start = time.process_time()
    for _ in range(batch):
        call()
    return (time.process_time() - start) / batch


def _interleaved(calls: dict[str, Callable[[], Any]], repeats: int, batch: int) -> dict:
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(_cpu(call, batch))
    return {name: statistics.median(values) for name, values in times.items()}


def _with(attr: str, value: int, call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        saved = getattr(dispatch, attr)
        setattr(dispatch, attr, value)
        try:
            return call()
        finally:
            setattr(dispatch, attr, saved)

    return run


def sample_index_row(documents: int, seq: int, repeats: int) -> dict:
    rng = numpy.random.default_rng(documents)
    sizes = rng.integers(20, 400, documents).astype(numpy.int32)
    order = rng.permutation(documents).astype(numpy.int32)
    args = (sizes, order, seq, 1, int(sizes.sum()), True, 1)
    name = "SAMPLE_VECTORIZED_MAX_DOCUMENTS"
    calls = {
        "vectorized": _with(name, 1 << 62, lambda: build_sample_index(*args)),
        "kernel": _with(name, -1, lambda: build_sample_index(*args)),
    }
    batch = max(1, 200_000 // documents)
    return _interleaved(calls, repeats, batch)


def shuffle_row(size: int, dtype: str, repeats: int) -> dict:
    array = numpy.arange(size, dtype=dtype)
    name = "SHUFFLE_KERNEL_MIN_SIZE"
    states = numpy.random.RandomState(1), numpy.random.RandomState(1)  # seeding: ~0.1 ms
    calls = {
        "numpy": _with(name, 1 << 62, lambda: legacy_shuffle(states[0], array)),
        "kernel": _with(name, 0, lambda: legacy_shuffle(states[1], array)),
    }
    return _interleaved(calls, repeats, max(1, 200_000 // size))


_FIRST_CALL = """
import time, numpy
from tokenloom.index import build_sample_index, dispatch, legacy_shuffle
sizes = numpy.full(100, 50, numpy.int32); order = numpy.arange(100, dtype=numpy.int32)
dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS = -1; dispatch.SHUFFLE_KERNEL_MIN_SIZE = 0
wall, cpu = time.perf_counter(), time.process_time()
build_sample_index(sizes, order, 64, 1, 5000, True, 1)
legacy_shuffle(numpy.random.RandomState(1), numpy.arange(100, dtype=numpy.int32))
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def first_call(runs: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of a fresh process's first sample-index + shuffle kernel calls."""
    out = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        wall, cpu = (float(v) for v in done.stdout.split())
        out.append((wall, cpu))
    return out


_COLD_BUILD = """
import json, sys, time
sys.path.insert(0, sys.argv[4])
import numba  # noqa: F401  (imported before timing, as bench_peers does)
from sides import build_gpt_dataset, describe, gpt_classes
from tokenloom.index import dispatch
gpt_classes("tokenloom")
if sys.argv[1] == "old":
    dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS, dispatch.SHUFFLE_KERNEL_MIN_SIZE = 4096, 8192
wall, cpu = time.perf_counter(), time.process_time()
desc = describe(sequence_length=4096, path_to_cache=sys.argv[3])
build_gpt_dataset("tokenloom", sys.argv[2], None, desc)[0]
loaded = [n for n in ("sample_index", "shuffle") if "tokenloom.kernels." + n in sys.modules]
print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu, loaded]))
"""


def cold_builds(prefix: str, rounds: int) -> dict[str, list]:
    """bench_peers' tokenloom cold start-up (construct + first sample, empty cache) in
    fresh processes, the old thresholds (4,096 / 8,192) and these taking turns."""
    import os
    import tempfile

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [os.path.dirname(__file__) + "/../src", os.environ.get("PYTHONPATH", "")]
        ),
    )
    runs: dict[str, list] = {"old": [], "new": []}
    for k in range(rounds):
        for side in ("old", "new") if k % 2 == 0 else ("new", "old"):
            with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as cache:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _COLD_BUILD,
                        side,
                        prefix,
                        cache,
                        os.path.dirname(os.path.abspath(__file__)),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=600,
                    env=env,
                )
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--first-calls", type=int, default=3)
    parser.add_argument("--cold-prefix", help="only the cold start-up A/B on this corpus")
    parser.add_argument("--cold-rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.cold_prefix:
        for side, runs in cold_builds(args.cold_prefix, args.cold_rounds).items():
            print(
                f"{side} thresholds, cold start-up (wall ms / CPU ms / kernels loaded):",
                "; ".join(
                    f"{w * 1e3:.0f} / {c * 1e3:.0f} / {','.join(k) or '-'}" for w, c, k in runs
                ),
            )
        return 0
    sizes = (4096, 16_384, 32_768, 65_536, 131_072, 262_144)
    build_sample_index(
        numpy.full(9, 5, numpy.int32), numpy.arange(9, dtype=numpy.int32), 4, 1, 45, True, 1
    )  # imports
    _with(
        "SAMPLE_VECTORIZED_MAX_DOCUMENTS",
        -1,
        lambda: build_sample_index(
            numpy.full(9, 5, numpy.int32), numpy.arange(9, dtype=numpy.int32), 4, 1, 45, True, 1
        ),
    )()
    _with(
        "SHUFFLE_KERNEL_MIN_SIZE",
        0,
        lambda: legacy_shuffle(numpy.random.RandomState(0), numpy.arange(9)),
    )()  # numba loaded before timing
    print(f"sample index (seq {args.seq}), ms CPU: documents  vectorized  kernel")
    for n in sizes:
        row = sample_index_row(n, args.seq, args.repeats)
        print(f"  {n:>9,}  {row['vectorized'] * 1e3:9.3f}  {row['kernel'] * 1e3:7.3f}")
    for dtype in ("int32", "int64"):
        print(f"shuffle {dtype}, ms CPU: items  numpy  kernel")
        for n in sizes:
            row = shuffle_row(n, dtype, args.repeats)
            print(f"  {n:>9,}  {row['numpy'] * 1e3:8.3f}  {row['kernel'] * 1e3:7.3f}")
    if args.first_calls:
        calls = first_call(args.first_calls)
        print(
            "first kernel calls of a fresh process (wall s, CPU s):",
            ", ".join(f"{w:.3f}/{c:.3f}" for w, c in calls),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
