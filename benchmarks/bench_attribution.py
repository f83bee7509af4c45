"""What ``return_document_ranges`` (source attribution) costs on ``get_batch``.

    .venv/bin/python benchmarks/bench_attribution.py [--sources 8] [--seq 4096] \
        [--batch 8] [--calls 4000]
    .venv/bin/python benchmarks/bench_attribution.py --old OLD/src --new src \
        [--rounds 3] [--sources 8] ...


Builds a blend of ``--sources`` real corpora (uint16 tokens, documents of 16..4,096
tokens) twice over the same index cache, once with ``return_document_ranges=True`` and
once without, and times random micro-batches of ``--batch`` samples of ``--seq``
tokens on each, interleaved, two ways: ``BlendedDataset.get_batch`` alone, and the
training loader's ``collate_batch`` (get_batch into torch tensors, what a DataLoader
worker runs per micro-batch). Each figure is the median of ``--calls`` calls timed one
by one, the two sides alternating call by call (on a machine shared with other jobs
the median of single calls is stable to a few tenths of a microsecond, where a mean
over rounds is not). Prints one JSON line with the times and the
overheads, the figures BENCHMARKS.md quotes.

With ``--old``/``--new`` (two ``src`` folders) the same measurement runs in a child
process per tree over the same corpora (``--data``, made once), the trees taking turns
``--rounds`` times; each tree's best round (its smallest ``get_batch`` overhead in
microseconds) counts, as in ``bench_pool.py``: on a shared machine one tree's round can
land in a burst of load that the other's missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import numpy


def _corpus(prefix: str, seed: int, tokens: int) -> str:
    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(16, 4096, max(1, tokens // 2048))
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    builder.add_flat_documents(rng.integers(3, 32000, int(lengths.sum())), lengths.tolist())
    builder.finalize(prefix + ".idx")
    return prefix


def _blend(prefixes: list[str], cache: str, seq: int, samples: int, attribution: bool):
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split
    from tokenloom.datasets.blended import BlendedDataset

    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=seq,
        split="100,0,0",
        blend=(prefixes, None),
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=cache,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        return_document_ranges=attribution,
    )
    weights = [1.0 / len(prefixes)] * len(prefixes)
    parts = []
    for prefix in prefixes:
        low = GPTDataset.build_low_level_dataset(prefix, config)
        documents = numpy.arange(GPTDataset.numel_low_level_dataset(low), dtype=numpy.int32)
        parts.append(GPTDataset(low, prefix, documents, samples, Split.train, config))
    return BlendedDataset(parts, weights, samples, config)


def _per_call(off, on, batches: list[list[int]], collate: bool) -> tuple[float, float]:
    """Median seconds per call of ``off`` and ``on``, timed call by call and interleaved
    (the order alternates), so that a burst of load from other jobs hits both sides alike
    and a preempted call is an outlier the median ignores."""
    from tokenloom.training.collate import BufferPool, collate_batch

    pools = {id(off): BufferPool(), id(on): BufferPool()}
    times: dict[int, list[float]] = {id(off): [], id(on): []}
    clock = time.perf_counter
    for i, indices in enumerate(batches):
        for blend in (off, on) if i % 2 else (on, off):
            start = clock()
            if collate:
                collate_batch(blend, indices, pool=pools[id(blend)])
            else:
                blend.get_batch(indices)
            times[id(blend)].append(clock() - start)
    return float(numpy.median(times[id(off)])), float(numpy.median(times[id(on)]))


def _measure(args: argparse.Namespace, folder: str, cache: str) -> dict[str, Any]:
    """One row over the corpora in ``folder`` (made there when missing)."""
    prefixes = [
        os.path.join(folder, f"c{i}")
        if os.path.exists(os.path.join(folder, f"c{i}.idx"))
        else _corpus(os.path.join(folder, f"c{i}"), i, 4 * args.seq * 200)
        for i in range(args.sources)
    ]
    samples = 200 * args.sources
    off = _blend(prefixes, cache, args.seq, samples, False)
    on = _blend(prefixes, cache, args.seq, samples, True)
    rng = numpy.random.default_rng(0)
    batches = [rng.integers(0, len(off), args.batch).tolist() for _ in range(args.calls)]
    row: dict[str, Any] = {
        "sources": args.sources,
        "sequence_length": args.seq,
        "micro_batch": args.batch,
    }
    for path, collate in (("get_batch", False), ("collate", True)):
        _per_call(off, on, batches[:50], collate)  # warm: kernels, page cache
        t_off, t_on = _per_call(off, on, batches, collate)
        row[f"{path}_us_off"] = round(t_off * 1e6, 1)
        row[f"{path}_us_on"] = round(t_on * 1e6, 1)
        row[f"{path}_overhead_pct"] = round(100 * (t_on / t_off - 1), 2)
    return row


def _trees(args: argparse.Namespace) -> dict[str, Any]:
    """``--old``/``--new``: both trees in turn, ``--rounds`` times; each one's best round."""
    child = [f"--{name}={getattr(args, name)}" for name in ("sources", "seq", "batch", "calls")]
    best: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tokenloom-bench-attribution-") as folder:
        for _ in range(args.rounds):
            for tag, src in (("old", args.old), ("new", args.new)):
                env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
                command = [sys.executable, __file__, *child, "--data", folder, "--cache", tag]
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                delta = row["get_batch_us_on"] - row["get_batch_us_off"]
                if tag not in best or delta < best[tag]["get_batch_us_delta"]:
                    best[tag] = {**row, "get_batch_us_delta": round(delta, 2)}
    result = {"rounds": args.rounds, **{tag: best[tag] for tag in ("old", "new")}}
    print(json.dumps(result))
    return result


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Measure and print (and return) one JSON row (with ``--old``/``--new``: one per tree)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--calls", type=int, default=4000, help="calls per side and path")
    parser.add_argument("--old", help="src folder of the tree to compare against")
    parser.add_argument("--new", help="src folder of the tree under test")
    parser.add_argument("--rounds", type=int, default=3, help="turns per tree (--old/--new)")
    parser.add_argument("--data", help="folder for the corpora (default: a temporary one)")
    parser.add_argument("--cache", default="cache", help="index cache name under --data")
    args = parser.parse_args(argv)
    if args.old or args.new:
        if not (args.old and args.new):
            parser.error("--old and --new go together")
        return _trees(args)
    if args.data:
        row = _measure(args, args.data, os.path.join(args.data, args.cache))
    else:
        with tempfile.TemporaryDirectory(prefix="tokenloom-bench-attribution-") as folder:
            row = _measure(args, folder, os.path.join(folder, args.cache))
    print(json.dumps(row))
    return row


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's entry (``benchmarks/run.py --only attribution``): one row per blend."""
    rows = []
    for sources, batch in ((1, 8), (8, 8)) if ctx.get("quick") else ((1, 8), (8, 8), (64, 16)):
        calls = ["--calls", "1000"] if ctx.get("quick") else []
        r = main(["--sources", str(sources), "--batch", str(batch), *calls])
        pct = r["get_batch_overhead_pct"]
        rows.append(
            {
                "target": "7 attribution get_batch",
                "case": f"{sources} sources, micro-batch {batch}, seq {r['sequence_length']}",
                "megatron_display": "-",
                "tokenloom_display": (
                    f"off {r['get_batch_us_off']} us, on {r['get_batch_us_on']} us "
                    f"(collate {r['collate_overhead_pct']:+.1f} %)"
                ),
                "ratio_display": f"{pct:+.1f} %",
                "goal": "<= 5 % of get_batch",
                "met": bool(pct <= 5.0),
                **r,
            }
        )
    return rows


if __name__ == "__main__":
    main()
