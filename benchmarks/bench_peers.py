"""Issue 22 §5: peers side by side on one corpus, random ``dataset[i]`` and start-up.

    bash benchmarks/setup_peers.sh            # .peers-venv: torch 2.13.0 CPU, OLMo-core, litdata
    PYTHONPATH=src:$TOKENLOOM_MEGATRON_PATH python benchmarks/bench_peers.py

Sides, each in its own child process (best of ``--repeats`` children for start-up):

- ``tokenloom`` and ``megatron`` (megatron-core): ``GPTDataset`` over the corpus's
  ``.bin``/``.idx`` (one epoch, exact shuffle), run with this interpreter;
- ``olmo``: OLMo-core's ``NumpyFSLDataset`` over the very same ``.bin`` (a raw uint16
  token file is what it reads), run with ``.peers-venv``;
- ``litdata``: litdata's ``StreamingDataset`` with ``TokensLoader`` over the format
  ``optimize()`` writes from the same documents (written once, before timing).

A sample is ``--seq`` + 1 tokens on every side (megatron's ``add_extra_token``; OLMo-core
and litdata are asked for that many tokens a row), so every side reads the same bytes a
sample. Start-up = construct (index caches already built: warm) + first sample, measured
in a fresh child after its imports; the cold start (first child, empty cache) is shown
for the two sides that build an index. ``dataset[i]``: the same random indices (modulo
each side's length), one sample at a time, best of several passes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_PY = ROOT / ".peers-venv" / "bin" / "python"
SIDES = ("tokenloom", "megatron", "olmo", "litdata")


# --------------------------------------------------------------------------- children


def _open_gpt(side: str, p: dict[str, Any]) -> Any:
    sys.path.insert(0, str(HERE))
    from sides import build_gpt_dataset, describe

    desc = describe(sequence_length=p["seq"], path_to_cache=p["cache"][side])
    return build_gpt_dataset(side, p["prefix"], None, desc)


def _open_olmo(p: dict[str, Any]) -> Any:
    import numpy
    from olmo_core.data import NumpyFSLDataset

    ds = NumpyFSLDataset(
        p["prefix"] + ".bin",
        sequence_length=p["seq"] + 1,
        pad_token_id=0,
        eos_token_id=p["eod"],
        vocab_size=p["vocab"],
        dtype=numpy.uint16,
    )
    ds.work_dir = Path(p["cache"]["olmo"])
    ds.prepare()
    return ds


def _open_litdata(p: dict[str, Any]) -> Any:
    from litdata import StreamingDataset
    from litdata.streaming.item_loader import TokensLoader

    return StreamingDataset(
        p["litdata_dir"], item_loader=TokensLoader(block_size=p["seq"] + 1), shuffle=False
    )


def _imports(side: str) -> None:
    if side in ("tokenloom", "megatron"):  # the classes the builds use, numba with tokenloom
        sys.path.insert(0, str(HERE))
        from sides import gpt_classes

        if side == "tokenloom":
            import numba  # noqa: F401

            import tokenloom.index  # noqa: F401
        gpt_classes(side)  # tokenloom.datasets imports GPTDataset lazily: here, not timed
    elif side == "olmo":
        import olmo_core.data  # noqa: F401
    else:
        import litdata  # noqa: F401


def child(side: str, p: dict[str, Any]) -> dict[str, Any]:
    """Import, construct + first sample (timed), then random dataset[i] (best of passes)."""
    import numpy

    t0 = time.perf_counter()
    _imports(side)
    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    if side in ("tokenloom", "megatron"):
        ds = _open_gpt(side, p)
    else:
        ds = _open_olmo(p) if side == "olmo" else _open_litdata(p)
    construct_s = time.perf_counter() - t0
    first = ds[0]
    startup_s = time.perf_counter() - t0
    n = len(ds)
    out: dict[str, Any] = dict(import_s=import_s, startup_s=startup_s, len=n)
    out["construct_s"] = construct_s
    if p["fetch"]:
        idx = (numpy.random.default_rng(7).integers(0, 1 << 62, size=p["n_fetch"]) % n).tolist()
        for i in idx[:64]:
            ds[i]  # first touches (lazy opens, chunk reads) stay out of the timing
        best = float("inf")
        for _ in range(p["passes"]):
            t1 = time.perf_counter()
            for i in idx:
                ds[i]
            best = min(best, time.perf_counter() - t1)
        out["us_per_sample"] = best / len(idx) * 1e6
        out["tokens"] = int(len(_tokens(first)))
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _tokens(sample: Any) -> Any:
    if isinstance(sample, dict):
        sample = sample.get("input_ids", sample.get("tokens"))
    return sample.numpy() if hasattr(sample, "numpy") else sample


def litdata_optimize(p: dict[str, Any]) -> dict[str, Any]:
    """Write litdata's optimised format from the corpus's documents (TokensLoader chunks)."""
    import numpy
    from litdata import optimize
    from litdata.streaming.item_loader import TokensLoader

    idx = numpy.load(p["doc_bounds"])
    groups = numpy.array_split(numpy.arange(len(idx) - 1), max(1, p["groups"]))
    inputs = [(int(g[0]), int(g[-1]) + 1) for g in groups if len(g)]
    t0 = time.perf_counter()
    optimize(
        fn=_LitDocs(p["prefix"] + ".bin", p["doc_bounds"]),
        inputs=inputs,
        output_dir=p["litdata_dir"],
        chunk_size=(p["seq"] + 1) * 1024,
        item_loader=TokensLoader(),
        num_workers=1,
    )
    return dict(optimize_s=time.perf_counter() - t0)


class _LitDocs:
    """optimize()'s fn: one token tensor per document of a (first, last) range."""

    def __init__(self, bin_path: str, bounds_path: str) -> None:
        self.bin_path, self.bounds_path = bin_path, bounds_path

    def __call__(self, item: tuple[int, int]) -> Any:
        import numpy
        import torch

        tokens = numpy.memmap(self.bin_path, dtype=numpy.uint16, mode="r")
        bounds = numpy.load(self.bounds_path)
        for d in range(item[0], item[1]):
            doc = numpy.asarray(tokens[bounds[d] : bounds[d + 1]], dtype=numpy.int32)
            yield torch.from_numpy(doc)


# --------------------------------------------------------------------------- parent


def _run_child(side: str, p: dict[str, Any], task: str = "child") -> dict[str, Any]:
    python = str(PEERS_PY) if side in ("olmo", "litdata") else sys.executable
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    if side in ("olmo", "litdata"):
        env.pop("PYTHONPATH", None)  # the peers' venv alone
    cmd = [python, str(Path(__file__).resolve()), "--_child", task, side, json.dumps(p)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        return {"error": f"{side} child failed ({proc.returncode}): {tail}"}
    return json.loads(lines[-1])


def _prepare(args: Any) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import numpy

    from data import EOD, VOCAB_SIZE, write_corpus

    root = Path(args.data_dir)
    prefix = str(root / f"peers-{args.docs}-{int(args.median)}" / "corpus")
    corpus = write_corpus(prefix, args.docs, seed=22, median=args.median)
    from tokenloom.format import IndexedDataset

    ds = IndexedDataset(prefix)
    bounds = numpy.concatenate([[0], numpy.cumsum(ds.sequence_lengths, dtype=numpy.int64)])
    numpy.save(prefix + ".bounds.npy", bounds)
    work = root / f"peers-work-{os.getpid()}"
    cache = {s: str(work / s) for s in SIDES}
    for c in cache.values():
        Path(c).mkdir(parents=True, exist_ok=True)
    return dict(
        prefix=prefix,
        doc_bounds=prefix + ".bounds.npy",
        seq=args.seq,
        eod=EOD,
        vocab=VOCAB_SIZE,
        cache=cache,
        litdata_dir=str(work / "litdata-optimized"),
        groups=16,
        n_fetch=args.n_fetch,
        passes=args.passes,
        fetch=False,
        tokens=corpus["tokens"],
        work=str(work),
    )


def measure(args: Any) -> dict[str, Any]:
    """Every side: cold start, best warm start of ``repeats`` children, dataset[i]."""
    p = _prepare(args)
    results: dict[str, Any] = {"corpus": dict(docs=args.docs, tokens=p["tokens"], seq=args.seq)}
    sides = args.sides.split(",")
    if "litdata" in sides:
        results["litdata_optimize"] = _run_child("litdata", p, task="optimize")
    for side in sides:
        cold = _run_child(side, p)
        warm = [_run_child(side, p) for _ in range(args.repeats)]
        fetch = [_run_child(side, dict(p, fetch=True)) for _ in range(2)]
        ok = [w for w in warm if "error" not in w]
        okf = [f for f in fetch if "error" not in f]
        row: dict[str, Any] = dict(cold_startup_s=cold.get("startup_s"), error=cold.get("error"))
        if ok:
            row.update(
                startup_s=min(w["startup_s"] for w in ok),
                import_s=min(w["import_s"] for w in ok),
                len=ok[0]["len"],
            )
        if okf:
            best = min(okf, key=lambda f: f["us_per_sample"])
            row.update(
                us_per_sample=best["us_per_sample"],
                tokens=best["tokens"],
                peak_rss_mib=best["peak_rss_mib"],
            )
        elif fetch:
            row["error"] = row["error"] or fetch[0].get("error")
        results[side] = row
        print(side, json.dumps(row), flush=True)
    import shutil

    shutil.rmtree(p["work"], ignore_errors=True)
    _table(results, sides)
    return results


def _table(results: dict[str, Any], sides: list[str]) -> None:
    c = results["corpus"]
    print(f"\n{c['docs']:,} documents, {c['tokens']:,} tokens, {c['seq']} + 1 tokens a sample")
    if "litdata_optimize" in results:
        print(f"litdata optimize(): {results['litdata_optimize']}")
    print("| side | samples | import s | start-up s (warm) | start-up s (cold) | dataset[i] us |")
    print("| --- | --- | --- | --- | --- | --- |")
    for side in sides:
        r = results[side]
        if r.get("error") and "us_per_sample" not in r:
            print(f"| {side} | error: {str(r['error'])[:160]} | | | | |")
            continue
        print(
            f"| {side} | {r.get('len', 0):,} | {r.get('import_s', 0):.2f} | "
            f"{r.get('startup_s', 0) * 1e3:.1f} ms | {(r.get('cold_startup_s') or 0) * 1e3:.1f} ms"
            f" | {r.get('us_per_sample', 0):.1f} |"
        )


def suite_rows(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """``benchmarks/run.py --only scale``: one row a side (start-up and dataset[i])."""
    argv = ["--data-dir", f"{ctx['data']}/peers"]
    if ctx.get("quick"):
        argv += ["--docs", "2000", "--repeats", "1", "--n-fetch", "200", "--passes", "2"]
    results = _main_results(argv)
    rows = []
    for side in SIDES:
        r = results.get(side)
        if r is None:
            continue
        text = (
            f"start-up {r.get('startup_s', 0) * 1e3:.1f} ms (cold "
            f"{(r.get('cold_startup_s') or 0) * 1e3:.1f} ms), dataset[i] "
            f"{r.get('us_per_sample', 0):.1f} us"
        )
        rows.append(
            {
                "target": "6 scale peers",
                "case": f"{side}, {results['corpus']['docs']:,} docs, seq {results['corpus']['seq']}",
                "tokenloom_display": r.get("error") or text,
                "megatron_display": "-",
                "ratio_display": "-",
                "peer": r,
            }
        )
    return rows


def _main_results(argv: Any) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if not PEERS_PY.exists():
        print(f"bench_peers: {PEERS_PY} missing: run bash benchmarks/setup_peers.sh", flush=True)
        args.sides = "tokenloom,megatron"
    return measure(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--median", type=float, default=1000.0)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--repeats", type=int, default=3, help="warm start-up children a side")
    parser.add_argument("--n-fetch", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--data-dir", default="/tmp/tokenloom-bench/data")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    return parser


def main(argv: Any = None) -> int:
    args = _parser().parse_args(argv)
    if args._child:
        task, side, params = args._child
        p = json.loads(params)
        out = litdata_optimize(p) if task == "optimize" else child(side, p)
        print(json.dumps(out), flush=True)
        return 0
    if not PEERS_PY.exists() and any(s in args.sides for s in ("olmo", "litdata")):
        print(f"bench_peers: {PEERS_PY} missing: run bash benchmarks/setup_peers.sh", flush=True)
        args.sides = ",".join(s for s in args.sides.split(",") if s not in ("olmo", "litdata"))
    results = measure(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
