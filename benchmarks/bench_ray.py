"""The Ray engine next to the local one, its fixed cost, the merge rate, and a scaling model.

    .venv/bin/python benchmarks/bench_ray.py [--max-mb 12] [--rounds 3] [--shards 8]

Self-contained and offline.  The input is the running Python's standard library written
as two JSONL files (as ``benchmarks/bench_preprocess.py`` does), 12 MB by default; the
tokenizer is a byte-level BPE (Hugging Face ``tokenizers``, 8,000 ids) trained on 2 MB of it.

Every measurement runs in a fresh Python process, in ``--rounds`` rounds whose side
order rotates, so that load from other jobs on a shared machine hits every side alike:

* ``local``: ``preprocess(workers=1)``, the local engine (tokens/s over its run);
* ``ray-1``, ``ray-2``: ``preprocess_ray`` on a private local cluster of 1 and 2 CPUs,
  ``--shards`` shards.  The child times ``ray.init`` (start), the run on the started
  cluster (shards + merge), and ``ray.shutdown`` (stop) separately; tokens/s is given
  for the run and end to end (start + run + stop).
* ``merge``: ``merge_shards`` on 8 shards of 64 MiB of tokens each, next to a plain
  sequential copy of the same bytes (``shutil.copyfileobj``, 16 MiB blocks) in the same
  process: the merge should run at the copy's rate (both read from the page cache
  when the machine has the memory; the numbers are GB/s of ``.bin`` written).

Per-shard times (the local engine's own time on each shard, on its worker) and the
merge rate feed the scaling model printed at the end: for ``N`` machines of ``C``
task slots, ``T(N) = start + W / (N * C) + merge``, where ``W`` is the total worker
time of the shards (best round of ``ray-1``/``ray-2``) scaled to the corpus, and ``merge`` is the
``.bin`` size over the merge rate (one machine, sequential: it does not shrink with
``N``, so past some ``N`` it dominates and ``--no-merge`` is the way on).

Results: min-max over rounds, then one JSON line prefixed by ``BENCH_RAY_JSON``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ["TOKENIZERS_PARALLELISM"] = "false"
for _name in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
    os.environ.setdefault(_name, "0")
JSON_MARKER = "BENCH_RAY_JSON"


def build_inputs(workdir: str, max_mb: float) -> dict[str, Any]:
    """The corpus files and the tokenizer spec (trained on the first ~2 MB of text)."""
    from tokenloom.preprocess.stdlib_corpus import write_stdlib_corpora
    from tokenloom.tokenizers.train import train_byte_level_bpe

    files = write_stdlib_corpora(os.path.join(workdir, "corpus"), max_bytes=int(max_mb * 1e6))
    paths = [files.code_path, files.docs_path]
    sample, size = [], 0
    with open(paths[0], encoding="utf-8") as handle:
        for line in handle:
            sample.append(json.loads(line)["text"])
            size += len(sample[-1])
            if size > 2_000_000:
                break
    tokenizer = os.path.join(workdir, "bpe.json")
    train_byte_level_bpe(sample, 8000, tokenizer)
    return {
        "paths": paths,
        "spec": f"hf:{tokenizer}",
        "bytes": sum(os.path.getsize(path) for path in paths),
    }


def child_local(spec: str, paths: list[str], out: str) -> dict[str, Any]:
    from tokenloom.preprocess import preprocess
    from tokenloom.tokenizers import load_tokenizer

    summary = preprocess(paths, out, load_tokenizer(spec), show_progress=False)
    return {"tokens": summary.tokens, "run": summary.seconds}


def child_ray(spec: str, paths: list[str], out: str, cpus: int, shards: int) -> dict[str, Any]:
    import ray
    from tokenloom.preprocess.ray_engine import preprocess_ray
    from tokenloom.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(spec)
    started = time.perf_counter()
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    start = time.perf_counter() - started
    summary = preprocess_ray(paths, out, tokenizer, num_shards=shards, show_progress=False)
    stopped = time.perf_counter()
    ray.shutdown()
    stop = time.perf_counter() - stopped
    return {
        "tokens": summary.tokens,
        "start": start,
        "run": summary.seconds,
        "stop": stop,
        "merge_s": summary.merge_seconds,
        "merge_bytes": summary.merge_bytes,
        "shard_s": [s.seconds for s in summary.shards],
        "shard_bytes": [s.nbytes for s in summary.shards],
    }


def child_merge(workdir: str, shards: int = 8, mib: int = 64) -> dict[str, Any]:
    import numpy

    from tokenloom.format import IndexedDatasetBuilder
    from tokenloom.preprocess.ray_engine import merge_shards

    rng, prefixes = numpy.random.default_rng(0), []
    for i in range(shards):  # documents of ~2,000 tokens
        prefix = os.path.join(workdir, f"m{i}")
        tokens = rng.integers(0, 32000, size=(mib << 20) // 2, dtype=numpy.uint16)
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
        builder.add_flat_documents(tokens, numpy.full(tokens.size // 2048, 2048))
        builder.finalize(prefix + ".idx")
        prefixes.append(prefix)
    stats = merge_shards(prefixes, os.path.join(workdir, "merged"))
    started = time.perf_counter()
    with open(os.path.join(workdir, "copy.bin"), "wb") as out:
        for prefix in prefixes:
            with open(prefix + ".bin", "rb") as source:
                shutil.copyfileobj(source, out, 16 << 20)
        out.flush()
        os.fsync(out.fileno())
    copy = time.perf_counter() - started
    return {
        "merge_gbps": stats.gigabytes_per_second,
        "copy_gbps": stats.nbytes / 1e9 / copy,
        "bytes": stats.nbytes,
    }


def run_child(argv: list[str]) -> None:
    side, rest = argv[0], argv[1:]
    if side == "local":
        result = child_local(rest[0], rest[3:], rest[1])
    elif side == "merge":
        result = child_merge(rest[1])
    else:
        result = child_ray(rest[0], rest[3:], rest[1], int(side.split("-")[1]), int(rest[2]))
    print(json.dumps(result))


def measure(side: str, spec: str, paths: list[str], workdir: str, shards: int) -> dict[str, Any]:
    """One measurement in a fresh process, in a fresh output folder."""
    out_dir = tempfile.mkdtemp(dir=workdir)
    try:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            side,
            spec,
            os.path.join(out_dir, "out") if side != "merge" else out_dir,
            str(shards),
            *paths,
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "RAY_TMPDIR": workdir},
        )
        if done.returncode != 0:
            raise RuntimeError(f"{side}: measurement failed:\n{done.stderr[-3000:]}")
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _span(values: list[float], fmt: str = "{:,.0f}") -> str:
    low, high = min(values), max(values)
    return (
        fmt.format(low)
        if fmt.format(low) == fmt.format(high)
        else f"{fmt.format(low)}-{fmt.format(high)}"
    )


def report(runs: dict[str, list[dict[str, Any]]], corpus_bytes: int) -> dict[str, Any]:
    """Print the tables; return the numbers."""
    print(f"\ninput: {corpus_bytes / 1e6:.1f} MB of JSONL; ranges are min-max over rounds")
    print(f"{'side':<8} {'run tok/s':>20} {'end-to-end tok/s':>20} {'start s':>11} {'stop s':>10}")
    numbers: dict[str, Any] = {}
    for side, results in runs.items():
        if side == "merge":
            continue
        run_rate = [r["tokens"] / r["run"] for r in results]
        total = [r["run"] + r.get("start", 0.0) + r.get("stop", 0.0) for r in results]
        e2e = [r["tokens"] / t for r, t in zip(results, total)]
        start = [r.get("start", 0.0) for r in results]
        stop = [r.get("stop", 0.0) for r in results]
        print(
            f"{side:<8} {_span(run_rate):>20} {_span(e2e):>20} {_span(start, '{:.2f}'):>11} "
            f"{_span(stop, '{:.2f}'):>10}"
        )
        numbers[side] = {
            "run_tokens_per_s": run_rate,
            "e2e_tokens_per_s": e2e,
            "start_s": start,
            "stop_s": stop,
        }
    merges = runs["merge"]
    print(
        f"merge of {merges[0]['bytes'] / 2**20:,.0f} MiB: "
        f"{_span([m['merge_gbps'] for m in merges], '{:.2f}')} GB/s; plain sequential copy "
        f"of the same bytes: {_span([m['copy_gbps'] for m in merges], '{:.2f}')} GB/s"
    )
    numbers["merge"] = merges
    return numbers


def scaling_model(rounds: list[dict[str, Any]], merges: list[dict[str, Any]]) -> dict[str, Any]:
    """Worker time per input byte and merge rate -> predicted hours for a 1 TB corpus.

    ``rounds``: every Ray measurement (1 and 2 workers).  The rate per task slot is the
    best round's (the least disturbed by other jobs; the range is printed too), the
    merge rate and the start cost the median round's.
    """
    rates = [sum(r["shard_bytes"]) / sum(r["shard_s"]) for r in rounds]  # bytes/s per slot
    rate = max(rates)
    out_ratio = statistics.median(r["merge_bytes"] / sum(r["shard_bytes"]) for r in rounds)
    merge = statistics.median(m["merge_gbps"] for m in merges) * 1e9
    start = statistics.median(r["start"] for r in rounds)
    corpus, slots = 1e12, 16
    print(
        f"\nscaling model: {rate / 1e6:.2f} MB/s of input per task slot (rounds: "
        f"{_span([r / 1e6 for r in rates], '{:.2f}')}), .bin = {out_ratio:.2f} x input, "
        f"merge {merge / 1e9:.2f} GB/s, start {start:.1f} s"
    )
    print(
        f"1 TB of JSONL on N machines of {slots} slots: T = start + 1 TB / (N x {slots} x "
        "rate) + .bin / merge rate"
    )
    rows = []
    for machines in (1, 4, 16, 64, 256):
        tokenize = corpus / (machines * slots * rate)
        merging = corpus * out_ratio / merge
        rows.append(
            {
                "machines": machines,
                "tokenize_h": tokenize / 3600,
                "merge_h": merging / 3600,
                "total_h": (start + tokenize + merging) / 3600,
            }
        )
        print(
            f"  N={machines:>3}: tokenise {tokenize / 3600:8.2f} h + merge "
            f"{merging / 3600:5.2f} h = {(start + tokenize + merging) / 3600:8.2f} h "
            f"(--no-merge: {(start + tokenize) / 3600:.2f} h)"
        )
    return {"rate_per_slot": rates, "out_ratio": out_ratio, "merge_bps": merge, "rows": rows}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-mb", type=float, default=12.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tlbr-")
    try:
        inputs = build_inputs(workdir, args.max_mb)
        sides = ["local", "ray-1", "ray-2", "merge"]
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for round_number in range(args.rounds):
            order = sides[round_number % len(sides) :] + sides[: round_number % len(sides)]
            for side in order:
                runs[side].append(
                    measure(side, inputs["spec"], inputs["paths"], workdir, args.shards)
                )
                print(f"round {round_number + 1}: {side} done", flush=True)
        numbers = report(runs, inputs["bytes"])
        numbers["model"] = scaling_model(runs["ray-1"] + runs["ray-2"], runs["merge"])
        numbers["raw"] = runs
        print(JSON_MARKER + " " + json.dumps(numbers))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
