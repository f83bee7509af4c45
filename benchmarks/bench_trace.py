"""How long ``tokenloom trace --document`` takes on a large run (issue 21 §2: seconds).

    .venv/bin/python benchmarks/bench_trace.py [--samples 10000000] [--seq 8] \
        [--gbs 256] [--mbs 4] [--world 8] [--loader cyclic] [--documents 5] [--quarantine] \
        [--folder DIR]

Writes two real corpora (uint16, documents of 2..64 tokens) big enough for
``--samples`` train samples of ``--seq`` tokens, a config with Megatron's keys, builds
the indices once (cold, timed apart), then times what ``trace --document`` does for
``--documents`` documents: the warm load of the run, the run's order from the loaders'
samplers (once per run; torch is not imported on this path, ``torch_imported`` says),
and per document the inverted scan (document_index -> sample_index -> inverse shuffle
-> inverse blend -> steps); and the manifest of the whole run (digests of every
step, given the order). ``--quarantine`` adds ``skip_batches`` (1 % of the steps, in 10
ranges) and ``block_documents`` (the timed documents) to the config, so the skipped
steps and blocked ranges are in every figure. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy


def _corpus(prefix: str, seed: int, tokens: int) -> str:
    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(2, 64, max(1, tokens // 33))
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    builder.add_flat_documents(rng.integers(3, 500, int(lengths.sum())), lengths.tolist())
    builder.finalize(prefix + ".idx")
    return prefix


def _config(folder: str, args: argparse.Namespace) -> str:
    tokens = args.samples * (args.seq + 1)
    big, small = os.path.join(folder, "big"), os.path.join(folder, "small")
    if not os.path.exists(small + ".idx"):  # --folder: written once
        _corpus(big, 1, tokens)
        _corpus(small, 2, tokens // 8)
    config = {
        "data_path": ["0.8", big, "0.2", small],
        "split": "100,0,0",
        "seq_length": args.seq,
        "data_cache_path": os.path.join(folder, "cache"),
        "train_iters": args.samples // args.gbs,
        "eval_interval": 10**9,
        "eval_iters": 0,
        "global_batch_size": args.gbs,
        "micro_batch_size": args.mbs,
        "world_size": args.world,
        "vocab_size": 500,
        "eod": 2,
        "dataloader_type": args.loader,
    }
    if args.quarantine:
        steps = args.samples // args.gbs
        config["skip_batches"] = [
            [k * steps // 10, k * steps // 10 + steps // 1000 + 1] for k in range(10)
        ]
        config["block_documents"] = [f"{small}:{d}" for d in _documents(args)]
    path = os.path.join(folder, "train.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(config, out)
    return path


def _documents(args: argparse.Namespace) -> list[int]:
    return [int(d) for d in numpy.random.default_rng(0).integers(0, 1000, args.documents)]


class _Clocks:
    """Wall and CPU (process) seconds since the last lap."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> list[float]:
        wall, cpu = time.perf_counter(), time.process_time()
        spent = [round(wall - self.wall, 3), round(cpu - self.cpu, 3)]
        self.wall, self.cpu = wall, cpu
        return spent


def _time(args: argparse.Namespace, folder: str) -> dict:
    from tokenloom.cli._trace_document import document_steps
    from tokenloom.cli._trace_manifest import make_manifest
    from tokenloom.cli._trace_order import run_order
    from tokenloom.cli._trace_ranges import parts
    from tokenloom.cli.trace import load_run, run_steps

    config = _config(folder, args)
    namespace = argparse.Namespace(
        config=config,
        state=None,
        dataloader_type=None,
        allow_mixture_change=False,
        allow_data_change=False,
    )
    begin = time.perf_counter()
    dataset, layout, _, quarantine = load_run(namespace)
    build = time.perf_counter() - begin
    clocks = _Clocks()
    dataset, layout, _, quarantine = load_run(namespace)
    load = clocks.lap()
    order = run_order(dataset, layout, run_steps(dataset, layout))
    order_s = clocks.lap()
    make_manifest(dataset, order, layout.describe(), 0, quarantine)
    manifest_s = clocks.lap()
    small = parts(dataset)[1]
    scans, hits = [], []
    for document in _documents(args):
        clocks.lap()
        report = document_steps(
            dataset, order, str(small.dataset_path), int(document), 0, quarantine
        )
        scans.append(clocks.lap())
        hits.append(report["count"])
    scan = [float(numpy.median([s[k] for s in scans])) for k in range(2)]
    return {
        "samples": len(dataset),
        "steps": int(order.shape[0]),
        "loader": args.loader,
        "quarantine": args.quarantine,
        "cold_build_s": round(build, 2),
        "warm_load_s": load,
        "order_s": order_s,
        "scan_s_median": [round(v, 3) for v in scan],
        "document_total_s": [round(load[k] + order_s[k] + scan[k], 2) for k in range(2)],
        "manifest_s": manifest_s,
        "torch_imported": "torch" in sys.modules,
        "hits_per_document": hits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--gbs", type=int, default=256)
    parser.add_argument("--mbs", type=int, default=4)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--loader", default="cyclic", choices=("single", "cyclic", "elastic"))
    parser.add_argument("--documents", type=int, default=5)
    parser.add_argument("--quarantine", action="store_true", help="skip steps, block documents")
    parser.add_argument("--folder", help="keep the corpora and cache here (reused when present)")
    args = parser.parse_args()
    if args.folder:
        os.makedirs(args.folder, exist_ok=True)
        print(json.dumps(_time(args, args.folder)))
        return
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(_time(args, folder)))


if __name__ == "__main__":
    main()
