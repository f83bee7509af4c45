"""What ``return_document_ranges`` (source attribution) costs on ``get_batch``.

    .venv/bin/python benchmarks/bench_attribution.py [--sources 8] [--seq 4096] \
        [--batch 8] [--calls 400] [--repeats 7]

Builds a blend of ``--sources`` real corpora (uint16 tokens, documents of 16..4,096
tokens) twice over the same index cache, once with ``return_document_ranges=True`` and
once without, and times random micro-batches of ``--batch`` samples of ``--seq``
tokens on each, interleaved, two ways: ``BlendedDataset.get_batch`` alone, and the
training loader's ``collate_batch`` (get_batch into torch tensors, what a DataLoader
worker runs per micro-batch). Each figure is the minimum over ``--repeats`` rounds of
the mean per call (noise only adds time). Prints one JSON line with the times and the
overheads, the figures BENCHMARKS.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

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


def _time(blend, batches: list[list[int]], collate: bool) -> float:
    from tokenloom.training.collate import BufferPool, collate_batch

    pool = BufferPool()
    start = time.perf_counter()
    for indices in batches:
        if collate:
            collate_batch(blend, indices, pool=pool)
        else:
            blend.get_batch(indices)
    return (time.perf_counter() - start) / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenloom-bench-attribution-") as folder:
        prefixes = [
            _corpus(os.path.join(folder, f"c{i}"), i, 4 * args.seq * 200)
            for i in range(args.sources)
        ]
        cache = os.path.join(folder, "cache")
        samples = 200 * args.sources
        off = _blend(prefixes, cache, args.seq, samples, False)
        on = _blend(prefixes, cache, args.seq, samples, True)
        rng = numpy.random.default_rng(0)
        batches = [rng.integers(0, len(off), args.batch).tolist() for _ in range(args.calls)]
        row = {"sources": args.sources, "sequence_length": args.seq, "micro_batch": args.batch}
        for path, collate in (("get_batch", False), ("collate", True)):
            _time(off, batches[:20], collate), _time(on, batches[:20], collate)  # warm
            best = {"off": float("inf"), "on": float("inf")}
            for _ in range(args.repeats):
                best["off"] = min(best["off"], _time(off, batches, collate))
                best["on"] = min(best["on"], _time(on, batches, collate))
            row[f"{path}_us_off"] = round(best["off"] * 1e6, 1)
            row[f"{path}_us_on"] = round(best["on"] * 1e6, 1)
            row[f"{path}_overhead_pct"] = round(100 * (best["on"] / best["off"] - 1), 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
