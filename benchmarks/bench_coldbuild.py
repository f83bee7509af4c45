"""Scale: the distributed cold build (``build_on_all_ranks``), as shares and a model.

    python benchmarks/bench_coldbuild.py [--prefixes 8 --docs 20000 --samples 200000 ...]
    python benchmarks/run.py --only scale           # the same, through the suite

Two blends: ``--prefixes`` large prefixes of ``--docs`` documents, ``--samples``
samples of ``--seq`` tokens in all (the issue's full size: 64 x 2M documents, 10M
samples of 4,096 tokens), and ``--small-prefixes`` small ones (the issue: 1,000).

On 2 shared cores the wall time of 16 ranks cannot show a speed-up, so the figures
are the work partition and a model built from measured costs:

1. each prefix's cold build (all its splits) is timed alone, one after the other, in
   this process (``build_s``), and its warm load from the cache (``load_s``);
2. for N = 1, 2, 4, 8, 16 ranks, :func:`tokenloom.distributed.spread.partition` splits
   the prefixes by :func:`tokenloom.builder.cold_build.estimate_cost` (the partition
   every rank follows); each rank's share is the sum of its prefixes' measured
   ``build_s`` (threads: divided by ``--threads``);
3. the modelled wall time of N nodes (one rank each) is the critical path (the largest
   share) plus the loads of the other ranks' prefixes plus 5 exchanges at
   ``--exchange-ms`` each; rank 0 alone (megatron-core's way, and ``build_on_all_ranks=
   False``) is the sum of every ``build_s``.

megatron-core's rank-0 time is its sum of per-prefix builds on the same data, measured
the same way when it imports (``TOKENLOOM_MEGATRON_PATH``), with ``--megatron``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

RANKS = (1, 2, 4, 8, 16)
EXCHANGES = 5  # visibility x2 (once), plan, published, loaded
SCALED = "--prefixes 8 --docs 250000 --median 50 --samples 2000000 --small-prefixes 200"
FULL = "--prefixes 64 --docs 2000000 --samples 10000000 --small-prefixes 1000"


def _corpus(directory: Path, count: int, docs: int, median: float, seed: int) -> list[str]:
    from data import write_corpus

    return [
        write_corpus(str(directory / f"p{i:05d}"), docs, seed + i, median)["prefix"]
        for i in range(count)
    ]


def _config(side: str, prefix: str, cache: Path, seq: int):
    from sides import config_for, describe

    return config_for(
        side, describe(sequence_length=seq, blend=([prefix], None), path_to_cache=str(cache))
    )


def _build_once(side: str, prefix: str, cache: Path, samples: int, seq: int) -> float:
    from sides import gpt_classes

    classes = gpt_classes(side, builder=True)
    config = _config(side, prefix, cache, seq)
    t0 = time.perf_counter()
    classes["BlendedMegatronDatasetBuilder"](
        classes["GPTDataset"], [samples, 0, 0], lambda: True, config
    ).build()
    return time.perf_counter() - t0


def measure(side: str, prefixes: list[str], samples: int, seq: int, work: Path) -> dict:
    """Per prefix: ``build_s`` (cold, alone) and ``load_s`` (warm) of ``side``."""
    if side == "megatron":
        os.environ.setdefault("TOKENLOOM_MEGATRON_PATH", "/work/main/.megatron-core")
        sys.path.insert(0, os.environ["TOKENLOOM_MEGATRON_PATH"])
    cache = work / f"cache-{side}"
    shutil.rmtree(cache, ignore_errors=True)
    per = max(1, math.ceil(samples / len(prefixes)))
    _build_once(side, prefixes[0], work / f"warmup-{side}", per, seq)  # imports, compiles
    shutil.rmtree(work / f"warmup-{side}", ignore_errors=True)
    build_s, load_s = [], []
    for prefix in prefixes:
        build_s.append(_build_once(side, prefix, cache, per, seq))
        load_s.append(_build_once(side, prefix, cache, per, seq))
    return {"build_s": build_s, "load_s": load_s, "samples_per_prefix": per}


def model(prefixes: list[str], measured: dict, seq: int, args: argparse.Namespace) -> list[dict]:
    """Shares, critical path and modelled wall time for each rank count."""
    from tokenloom.builder.cold_build import estimate_cost
    from tokenloom.distributed.spread import partition

    sizes = [measured["samples_per_prefix"], 0, 0]
    costs = [estimate_cost(p, [(0.0, 1.0), None, None], sizes, seq) for p in prefixes]
    build, load = measured["build_s"], measured["load_s"]
    rows = []
    for n in args.ranks:
        shares = partition(costs, n)
        rank0 = sum(build) + (sum(load) if n > 1 else 0.0)  # then the others load it all
        measured_share = [sum(build[j] for j in shares.jobs_of(r)) / args.threads for r in range(n)]
        walls = [
            measured_share[r]
            + sum(load[j] for j, owner in enumerate(shares.owners) if owner != r)
            + (EXCHANGES * args.exchange_ms / 1e3 if n > 1 else 0.0)
            for r in range(n)
        ]
        rows.append(
            {
                "ranks": n,
                "share_s": [round(s, 3) for s in measured_share],
                "prefixes_per_rank": [len(shares.jobs_of(r)) for r in range(n)],
                "critical_path_s": round(max(measured_share), 3),
                "ideal_s": round(sum(build) / args.threads / n, 3),
                "imbalance": round(max(measured_share) / (sum(build) / args.threads / n), 3),
                "model_wall_s": round(max(walls), 3),
                "rank0_alone_s": round(rank0, 3),
                "speedup_vs_rank0": round(rank0 / max(walls), 2),
            }
        )
    return rows


def blend_case(name: str, prefixes: list[str], args: argparse.Namespace, work: Path) -> dict:
    measured = measure("tokenloom", prefixes, args.samples, args.seq, work)
    case: dict[str, Any] = {
        "case": name,
        "prefixes": len(prefixes),
        "build_s_total": round(sum(measured["build_s"]), 3),
        "load_s_total": round(sum(measured["load_s"]), 3),
        "rows": model(prefixes, measured, args.seq, args),
    }
    if args.megatron:
        try:
            theirs = measure("megatron", prefixes, args.samples, args.seq, work)
            case["megatron_rank0_s"] = round(sum(theirs["build_s"]), 3)
        except Exception as error:  # noqa: BLE001 - reported, the tokenloom figures stand
            case["megatron_rank0_s"] = f"unavailable: {type(error).__name__}: {error}"
    return case


def _megatron_text(value: Any) -> str:
    if isinstance(value, (int, float)):
        return f"rank 0 alone {value:.3f} s"
    return str(value or "not run")


def limits() -> dict[str, Any]:
    """The machine's limits printed beside the figures: cores, fd limit, copy bandwidth."""
    import resource

    import numpy

    block = numpy.ones(64 << 20, dtype=numpy.uint8)
    t0 = time.perf_counter()
    for _ in range(4):
        block.copy()
    copy_gbs = 4 * block.nbytes / (time.perf_counter() - t0) / 1e9
    return {
        "cpus_usable": len(os.sched_getaffinity(0)),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "copy_gb_s": round(copy_gbs, 2),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prefixes", type=int, default=8, help="large prefixes (full: 64)")
    p.add_argument("--docs", type=int, default=20000, help="documents each (full: 2000000)")
    p.add_argument("--samples", type=int, default=20000, help="samples in all (full: 10000000)")
    p.add_argument("--seq", type=int, default=4096, help="tokens per sample")
    p.add_argument("--median", type=float, default=400.0, help="median document tokens")
    p.add_argument("--small-prefixes", type=int, default=100, help="small prefixes (full: 1000)")
    p.add_argument("--small-docs", type=int, default=200, help="documents per small prefix")
    p.add_argument("--ranks", type=lambda s: [int(x) for x in s.split(",")], default=list(RANKS))
    p.add_argument("--threads", type=int, default=1, help="num_dataset_builder_threads")
    p.add_argument("--exchange-ms", type=float, default=5.0, help="one bounded all_gather")
    p.add_argument("--megatron", action="store_true", help="also time megatron-core's rank 0")
    p.add_argument("--data-dir", default="/tmp/tokenloom-bench/data/coldbuild")
    p.add_argument("--work-dir", default="/tmp/tokenloom-bench/work/coldbuild")
    p.add_argument("--out", default="", help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    data, work = Path(args.data_dir), Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    large = _corpus(data / f"large-{args.docs}", args.prefixes, args.docs, args.median, 100)
    small = _corpus(data / f"small-{args.small_docs}", args.small_prefixes, args.small_docs, 50, 7)
    results = {
        "args": vars(args),
        "limits": limits(),
        "cases": [blend_case("large", large, args, work), blend_case("small", small, args, work)],
    }
    text = json.dumps(results, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return results


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's entry (``benchmarks/run.py --only scale``): one row per case and N."""
    argv = ["--data-dir", f"{ctx['data']}/coldbuild", "--work-dir", f"{ctx['work']}/coldbuild"]
    if ctx.get("quick"):
        argv += ["--prefixes", "4", "--docs", "5000", "--samples", "4000", "--small-prefixes", "20"]
    else:  # BENCHMARKS.md's scaled-down sizes; TOKENLOOM_COLDBUILD_ARGS for others (full)
        argv += os.environ.get("TOKENLOOM_COLDBUILD_ARGS", SCALED).split()
    results = main(argv + ["--megatron"])
    limits = results["limits"]
    machine = (
        f"{limits['cpus_usable']} cores, fd limit {limits['fd_limit']}, "
        f"copy {limits['copy_gb_s']} GB/s"
    )
    rows = []
    for case in results["cases"]:
        for row in case["rows"]:
            rows.append(
                {
                    "target": "6 scale cold build",
                    "case": f"{case['case']} x{case['prefixes']}, N={row['ranks']} ranks"
                    + (f" ({machine})" if row["ranks"] == 1 else ""),
                    "megatron_display": _megatron_text(case.get("megatron_rank0_s")),
                    "tokenloom_display": (
                        f"model {row['model_wall_s']:.3f} s (critical path "
                        f"{row['critical_path_s']:.3f} s, imbalance {row['imbalance']:.2f})"
                    ),
                    "ratio_display": f"{row['speedup_vs_rank0']:.2f}x rank 0 alone",
                    "rank0_alone_s": row["rank0_alone_s"],
                    "limits": results["limits"],
                }
            )
    return rows


if __name__ == "__main__":
    main()
