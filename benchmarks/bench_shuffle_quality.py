"""Issue 22 §2: how the ``shuffle_mode="bijection"`` order compares with a true random
permutation (numpy's ``RandomState(seed).permutation``, what the exact shuffle is).

    PYTHONPATH=src python benchmarks/bench_shuffle_quality.py [--samples 1000000] [--seeds 3]

Statistics, each for the bijection and for the true permutation of ``--samples`` rows:

* ``gap_mean``, ``gap_p01``/``p50``/``p99``: distances ``|row[k+1] - row[k]| / n`` between
  consecutive draws (for a uniform random permutation: mean 1/3, median 1 - 1/sqrt(2));
  ``gap_ks``: the two-sample Kolmogorov-Smirnov distance between the two gap samples;
* ``lag1_corr``: correlation of ``row[k]`` with ``row[k + 1]`` (0 expected);
* ``pos_corr``: correlation of ``row[k]`` with ``k`` (0 expected);
* ``window_repeat``: in windows of ``--window`` consecutive draws, the fraction of draws
  whose row block (``row // --block``: neighbouring samples, mostly the same documents)
  was already drawn in that window (first 2,000 windows; compared side by side);
* ``ns_per_row``: time of ``shuffle_rows`` (the kernel) per position.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tokenloom.index.bijection import bijection_table, shuffle_rows  # noqa: E402


def _stats(rows: numpy.ndarray, window: int, block: int) -> dict[str, float]:
    n = rows.shape[0]
    gaps = numpy.abs(numpy.diff(rows)).astype(numpy.float64) / n
    k = numpy.arange(n, dtype=numpy.float64)
    blocks = (rows // block)[: (n // window) * window].reshape(-1, window)
    distinct = numpy.array([numpy.unique(w).size for w in blocks[:2000]])
    return {
        "gap_mean": float(gaps.mean()),
        "gap_p01": float(numpy.quantile(gaps, 0.01)),
        "gap_p50": float(numpy.quantile(gaps, 0.5)),
        "gap_p99": float(numpy.quantile(gaps, 0.99)),
        "lag1_corr": float(numpy.corrcoef(rows[:-1], rows[1:])[0, 1]),
        "pos_corr": float(numpy.corrcoef(k, rows)[0, 1]),
        "window_repeat": float(1.0 - distinct.mean() / window),
        "_gaps": gaps,  # type: ignore[dict-item]
    }


def _ks(a: numpy.ndarray, b: numpy.ndarray) -> float:
    a, b = numpy.sort(a), numpy.sort(b)
    grid = numpy.concatenate([a, b])
    fa = numpy.searchsorted(a, grid, side="right") / a.size
    fb = numpy.searchsorted(b, grid, side="right") / b.size
    return float(numpy.abs(fa - fb).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--block", type=int, default=64)
    args = parser.parse_args()
    n = args.samples
    positions = numpy.arange(n, dtype=numpy.int64)
    for seed in range(args.seeds):
        table = bijection_table(n, n, seed, "")
        shuffle_rows(table, positions[:64])  # load the kernel before timing
        start = time.perf_counter()
        rows = shuffle_rows(table, positions)
        elapsed = time.perf_counter() - start
        true = numpy.random.RandomState(seed).permutation(n)
        if not numpy.array_equal(numpy.sort(rows), positions):
            raise SystemExit(f"seed {seed}: not a permutation")
        ours, theirs = _stats(rows, args.window, args.block), _stats(true, args.window, args.block)
        ks = _ks(ours.pop("_gaps"), theirs.pop("_gaps"))  # type: ignore[arg-type]
        print(
            json.dumps(
                {
                    "samples": n,
                    "seed": seed,
                    "bijection": {k: round(v, 5) for k, v in ours.items()},
                    "permutation": {k: round(v, 5) for k, v in theirs.items()},
                    "gap_ks": round(ks, 5),
                    "ns_per_row": round(elapsed / n * 1e9, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
