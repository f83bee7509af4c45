"""Packing schedulers: balance (max/mean of modelled rank time) and scheduling time.

Global batches of 1,024 sequences over DP x CP = 64 ranks, three length
distributions (lognormal; a long tail with eight 32k sequences; the token counts of
the demo's standard-library corpora under a byte-level BPE trained on them), two
layouts (CP = 4 x DP = 16 with 8k tokens per rank; CP = 1 x DP = 64 with 32k).

* DpBalanced: tokenloom's, identical to Megatron-LM's (golden-tested; not in the
  megatron-core 0.16.1 wheel, so it has no megatron-core timing).
* BalancedCP: megatron-core 0.16.1's, run in its own interpreter
  (``--megatron-python``, default ``.bench-venv/bin/python``), and tokenloom's; the
  script checks both give the same schedule on every batch.
* CostBalanced: tokenloom's (tokens + attention cost).

Rank time follows ``tokenloom.packing.rank_times`` with token_cost 1 and
attention_cost 1/4096 (attention equals the linear work at 4k tokens).  Times are
the median of ``--repeats`` calls per batch, then the median over batches.

    python benchmarks/bench_packing.py [--batches 5] [--repeats 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tokenloom.packing import (  # noqa: E402
    BalancedCPScheduler,
    CostBalancedScheduler,
    DpBalancedScheduler,
    imbalance,
    rank_times,
)

N, RANKS, LONG = 1024, 64, 32768
LAYOUTS = (
    ("cp1 x dp64, 32k/rank", 1, 64, 32768),
    ("cp4 x dp16, 8k/rank", 4, 16, 8192),
    ("cp8 x dp8, 4k/rank", 8, 8, 4096),
)
MEGATRON_SIDE = r"""
import json, sys, time, statistics, typing, warnings
warnings.simplefilter("ignore")
if not hasattr(typing, "override"):
    import typing_extensions; typing.override = typing_extensions.override
from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler
spec = json.load(open(sys.argv[1])); out = []
for case in spec:
    items = [tuple(x) for x in case["items"]]
    times, result = [], None
    for _ in range(case["repeats"]):
        s = BalancedCPScheduler(case["limit"], type("G", (), {"size": lambda self: case["ranks"]})())
        t = time.perf_counter(); result = s.get_groups_and_subsamples(items, None)
        times.append(time.perf_counter() - t)
    out.append({"ids": result[1], "seconds": statistics.median(times)})
json.dump(out, open(sys.argv[2], "w"))
"""


def lognormal(rng: numpy.random.Generator, cap: int) -> list[int]:
    return numpy.clip(rng.lognormal(numpy.log(1024), 1.0, N), 16, cap).astype(int).tolist()


def long_tail(rng: numpy.random.Generator, cap: int) -> list[int]:
    lengths = numpy.clip(256 * rng.pareto(1.2, N) + 64, 16, cap).astype(int)
    lengths[rng.choice(N, 8, replace=False)] = min(LONG, cap)
    return lengths.tolist()


def corpus_lengths() -> list[int]:
    """Token counts of every document of the demo's code and docs corpora."""
    from tokenizers import Tokenizer
    from tokenloom.preprocess.stdlib_corpus import docstrings, stdlib_sources
    from tokenloom.tokenizers.train import train_byte_level_bpe

    sources = list(stdlib_sources(max_bytes=12_000_000))
    documents = [text for _, text in sources]
    documents += [doc for rel, text in sources for _, doc in docstrings(text, rel)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokenizer.json")
        train_byte_level_bpe([t for _, t in sources[:400]], 8192, path)
        encoded = Tokenizer.from_file(path).encode_batch(documents)
    return [len(e.ids) for e in encoded if e.ids]


def real(rng: numpy.random.Generator, cap: int, pool: list[int]) -> list[int]:
    return numpy.minimum(rng.choice(pool, N), cap).astype(int).tolist()


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def megatron_side(python: str, cases: list[dict]) -> list[dict] | None:
    if not Path(python).exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps(cases))
        script = Path(tmp) / "side.py"
        script.write_text(MEGATRON_SIDE)
        proc = subprocess.run(
            [python, str(script), str(spec), str(out)], capture_output=True, text=True, timeout=3600
        )
        if proc.returncode:
            print(proc.stderr[-2000:], file=sys.stderr)
            return None
        return json.loads(out.read_text())


def run(args: argparse.Namespace) -> list[dict]:
    pool = corpus_lengths()
    rows = []
    for layout, cp, dp, limit in LAYOUTS:
        cap = limit * cp
        dists: dict[str, Callable[[numpy.random.Generator], list[int]]] = {
            "lognormal": lambda r, cap=cap: lognormal(r, cap),
            "long tail (8 x 32k)": lambda r, cap=cap: long_tail(r, cap),
            "stdlib corpora": lambda r, cap=cap: real(r, cap, pool),
        }
        for dist, make in dists.items():
            rng = numpy.random.default_rng(2026)
            batches = [list(enumerate(make(rng))) for _ in range(args.batches)]
            rows.append(measure(layout, dist, cp, dp, limit, batches, args))
    return rows


def measure(layout: str, dist: str, cp: int, dp: int, limit: int, batches: list, args: Any) -> dict:
    out: dict[str, Any] = {
        "layout": layout,
        "lengths": dist,
        "bound": statistics.median(bound(items, cp, dp, limit) for items in batches),
    }
    makers = {
        "dp_balanced": lambda: DpBalancedScheduler(limit, cp, dp, None),
        "cost_balanced": lambda: CostBalancedScheduler(limit, cp, dp, None),
    }
    for name, make in makers.items():
        scores, times = [], []
        for items in batches:
            schedule, seconds = median_time(
                lambda make=make, items=items: make().get_groups_and_subsamples(items), args.repeats
            )
            scores.append(imbalance(rank_times(schedule, dict(items))))
            times.append(seconds)
        out[name] = {
            "imbalance": statistics.median(scores),
            "ms": 1e3 * statistics.median(times),
            "per_batch": scores,
        }
    scores, times, mine = [], [], []
    for items in batches:
        (_, ids), seconds = median_time(
            lambda items=items: BalancedCPScheduler(limit, RANKS).get_groups_and_subsamples(items),
            args.repeats,
        )
        scores.append(imbalance(rank_times(ids, dict(items))))
        times.append(seconds)
        mine.append(ids)
    out["balanced_cp"] = {
        "imbalance": statistics.median(scores),
        "ms": 1e3 * statistics.median(times),
        "per_batch": scores,
    }
    bounds = [bound(items, cp, dp, limit) for items in batches]
    out["bounds"] = bounds
    out["cost_balanced"]["met"] = sum(
        c <= max(1.05, 1.001 * b) and c <= 1.0001 * min(d, m)
        for c, b, d, m in zip(
            out["cost_balanced"]["per_batch"], bounds, out["dp_balanced"]["per_batch"], scores
        )
    )
    theirs = megatron_side(
        args.megatron_python,
        [
            {"items": items, "limit": limit, "ranks": RANKS, "repeats": args.repeats}
            for items in batches
        ],
    )
    if theirs is not None:
        same = all(t["ids"] == [[list(r) for r in m] for m in ids] for t, ids in zip(theirs, mine))
        out["balanced_cp"]["megatron_ms"] = 1e3 * statistics.median(t["seconds"] for t in theirs)
        out["balanced_cp"]["same_schedule"] = same
    return out


def bound(items: list, cp: int, dp: int, limit: int) -> float:
    """A lower bound on max/mean for any schedule with fixed CP size (DP-rank granularity).

    The largest of: the costliest sequence plus the cheapest ones its DP rank must also
    hold (every DP rank runs at least ceil(tokens / (dp * limit * cp)) microbatches), and
    the pigeonhole pair (two of the dp + 1 costliest sequences share a DP rank).
    """
    lengths = numpy.array([n for _, n in items], dtype=numpy.float64)
    costs = numpy.sort(lengths + lengths * lengths / 4096)[::-1]
    mean = float(costs.sum()) / dp
    least = max(1, -(-int(lengths.sum()) // (dp * limit * cp)))
    alone = float(costs[0] + (costs[len(costs) - least + 1 :].sum() if least > 1 else 0.0))
    shared = max(
        (float(costs[j * dp - j : j * dp + 1].sum()) for j in range(1, (len(costs) - 1) // dp + 1)),
        default=0.0,
    )
    return max(1.0, alone / mean, shared / mean)


def table(rows: list[dict]) -> str:
    lines = [
        "| layout | lengths | best possible | DpBalanced (= Megatron-LM) "
        "| BalancedCP (= megatron-core) | CostBalanced | time DpBalanced "
        "| time BalancedCP tokenloom / megatron-core | time CostBalanced | target met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = r["balanced_cp"]
        mc = f"{b['megatron_ms']:.1f} ms" if "megatron_ms" in b else "n/a"
        same = "" if b.get("same_schedule", True) else " (SCHEDULES DIFFER)"
        lines.append(
            f"| {r['layout']} | {r['lengths']} | {r['bound']:.3f} "
            f"| {r['dp_balanced']['imbalance']:.3f} "
            f"| {b['imbalance']:.3f} | {r['cost_balanced']['imbalance']:.3f} "
            f"| {r['dp_balanced']['ms']:.2f} ms | {b['ms']:.1f} ms / {mc}{same} "
            f"| {r['cost_balanced']['ms']:.2f} ms "
            f"| {r['cost_balanced']['met']}/{len(r['cost_balanced']['per_batch'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="global batches per row")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per batch")
    parser.add_argument(
        "--megatron-python",
        default=str(ROOT / ".bench-venv" / "bin" / "python"),
        help="interpreter with megatron-core 0.16.1 installed",
    )
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = run(args)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
