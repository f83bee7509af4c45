"""Issue 22 §2: peak RSS and time of a cold GPTDataset index build at 10^7..10^9 samples.

    PYTHONPATH=src:$TOKENLOOM_MEGATRON_PATH python benchmarks/bench_scale_memory.py \
        --samples 100000000 [--sides megatron,tokenloom,bijection]

Each side runs in its own child (harness.run_side, peak RSS from wait4): megatron-core's
``GPTDataset`` and tokenloom's, over the same corpus (``--docs`` documents, lognormal
lengths around ``--median`` tokens), ``--sequence-length`` tokens a sample, a fresh
index cache folder each, so the figure is a cold build plus the cache write, as on the
first start of a run. ``bijection`` is tokenloom with ``shuffle_mode="bijection"`` (no
shuffle index). The child reports its RSS after its imports and the corpus open
(``rss_base_mib``), the build's wall time, and a checksum of 1,000 samples' rows so that
the two exact sides can be compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import run_side  # noqa: E402


def _side(params: dict[str, Any], probe: Any, side: str) -> dict[str, Any]:
    import numpy

    from sides import build_gpt_dataset, gpt_classes

    gpt_classes(side)  # imports (torch on megatron's side) before the base RSS
    if side == "tokenloom":
        import tokenloom.index  # noqa: F401  (numba kernels load lazily otherwise)
    probe.imported()
    extra = {} if params.get("mode") is None else {"shuffle_mode": params["mode"]}
    desc = _describe(params, extra)
    t0 = time.perf_counter()
    if params.get("builder"):
        dataset = _through_builder(side, params, desc)
    else:
        dataset = build_gpt_dataset(side, params["prefix"], params["samples"], desc)
    build_s = time.perf_counter() - t0
    count = len(dataset)
    rows = numpy.linspace(0, count - 1, num=min(count, 1000)).astype(numpy.int64)
    shuffle = getattr(dataset, "shuffle_index", None)
    digest = 0
    if shuffle is not None:
        digest = int(sum(int(shuffle[int(r)]) for r in rows))
    return {"min_s": build_s, "x_samples": count, "x_rows_digest": digest}


def _through_builder(side: str, params: dict[str, Any], desc: dict[str, Any]) -> Any:
    """The train split as ``BlendedMegatronDatasetBuilder`` builds it (one prefix)."""
    from sides import config_for, gpt_classes

    classes = gpt_classes(side, builder=True)
    config = config_for(side, dict(desc, blend=[[params["prefix"]], None], split="100,0,0"))
    builder = classes["BlendedMegatronDatasetBuilder"](
        classes["GPTDataset"], [params["samples"], 0, 0], lambda: True, config
    )
    return builder.build()[0]


def _describe(params: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    from sides import describe

    return describe(
        sequence_length=params["sequence_length"], path_to_cache=params["cache"], **extra
    )


def megatron_build(params: dict[str, Any], probe: Any) -> dict[str, Any]:
    """megatron-core's GPTDataset, cold."""
    return _side(params, probe, "megatron")


def tokenloom_build(params: dict[str, Any], probe: Any) -> dict[str, Any]:
    """tokenloom's GPTDataset, cold (``params["mode"]``: its shuffle_mode)."""
    return _side(params, probe, "tokenloom")


def main(argv: Any = None) -> int:
    """The command line: build each side, print the table."""
    measure(argv)
    return 0


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """``benchmarks/run.py --only scale``: peak RSS and build time a side.

    10^8 samples (10^6 with --quick); TOKENLOOM_SCALE_SAMPLES sets another count.
    """
    import os

    samples = os.environ.get("TOKENLOOM_SCALE_SAMPLES", "1000000" if ctx.get("quick") else "")
    argv = ["--data-dir", f"{ctx['data']}/scale", "--samples", samples or "100000000"]
    results = measure(argv)
    rows = []
    for side, rep in results.items():
        per = rep.get("min_s", 0) / max(1, rep.get("x_samples", 1)) * 1e9
        text = (
            f"peak {rep.get('peak_rss_mib') or 0:,.0f} MiB, build {rep.get('min_s', 0):.1f} s "
            f"({per:.0f} ns a sample)"
        )
        rows.append(
            {
                "target": "6 scale index memory",
                "case": f"{side}, {int(argv[-1]):,} samples",
                "tokenloom_display": rep.get("error", text)[:200],
                "megatron_display": "-",
                "ratio_display": "-",
                "scale_memory": rep,
            }
        )
    return rows


def measure(argv: Any = None) -> dict[str, Any]:
    """Run the sides of ``argv`` in their own children; returns their reports."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--median", type=float, default=300.0)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--sides", default="megatron,tokenloom,bijection")
    parser.add_argument(
        "--builder", action="store_true", help="build through BlendedMegatronDatasetBuilder"
    )
    parser.add_argument("--data-dir", default="/tmp/tokenloom-bench/data")
    args = parser.parse_args(argv)
    from data import write_corpus

    prefix = f"{args.data_dir}/scale-{args.docs}-{int(args.median)}/corpus"
    corpus = write_corpus(prefix, args.docs, seed=22, median=args.median)
    results = {}
    for side in args.sides.split(","):
        with tempfile.TemporaryDirectory(prefix="tl-scale-") as cache:
            params = dict(
                prefix=prefix,
                samples=args.samples,
                sequence_length=args.sequence_length,
                cache=cache,
                mode="bijection" if side == "bijection" else None,
                builder=args.builder,
            )
            target = "megatron_build" if side == "megatron" else "tokenloom_build"
            report = run_side(f"bench_scale_memory:{target}", params, timeout=3600)
        results[side] = report
        print(side, json.dumps(report), flush=True)
    _print_table(args, corpus, results)
    return results


def _print_table(args: Any, corpus: dict[str, Any], results: dict[str, Any]) -> None:
    print(
        f"\n{args.samples:,} samples of {args.sequence_length} tokens, {args.docs:,} documents "
        f"({corpus['tokens']:,} tokens an epoch)"
    )
    print("| side | peak RSS MiB | above imports MiB | build s | ns / sample |")
    print("| --- | --- | --- | --- | --- |")
    for side, rep in results.items():
        if "error" in rep:
            print(f"| {side} | error: {rep['error'][:120]} | | | |")
            continue
        peak, base = rep.get("peak_rss_mib") or 0, rep.get("rss_base_mib") or 0
        per = rep["min_s"] / max(1, rep["x_samples"]) * 1e9
        print(f"| {side} | {peak:,.0f} | {peak - base:,.0f} | {rep['min_s']:.1f} | {per:.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
