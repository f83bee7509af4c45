"""Blending indices of a 3-phase schedule vs a fixed blend (issue 20 §2: <= 1.2x).

``python benchmarks/bench_schedule.py --sources 1024 --size 10000000`` is the issue's
full size; the defaults are small enough for a shared CPU. Both sides are warmed once
(numba load) and timed best of ``--repeat``. Phases: constant, linear, constant at
``0, size/3, 2*size/3``; the fixed blend uses the first phase's weights.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy

from tokenloom.index import build_blending_indices
from tokenloom.index.schedule import build_scheduled_blending_indices


def _best(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Print the fixed and the scheduled build times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    weights = numpy.random.default_rng(0).lognormal(size=(3, args.sources))
    weights /= weights.sum(axis=1, keepdims=True)
    starts, linear = [0, args.size // 3, 2 * args.size // 3], [False, True, False]
    build_blending_indices(weights[0], 100_000)
    build_scheduled_blending_indices(starts, weights, linear, 100_000)
    fixed = _best(lambda: build_blending_indices(weights[0], args.size), args.repeat)
    scheduled = _best(
        lambda: build_scheduled_blending_indices(starts, weights, linear, args.size), args.repeat
    )
    print(
        f"sources={args.sources} size={args.size} fixed={fixed:.3f}s "
        f"schedule={scheduled:.3f}s ratio={scheduled / fixed:.2f}"
    )


if __name__ == "__main__":
    main()
