"""Target 2: random-access sample fetch, one sample at a time and in batches.

Both sides build a train ``GPTDataset`` (one epoch, sequence length 4096, no attention
mask) over the same corpus, each with its own index cache (built before timing),
then fetch the same random sample indices. The first few samples are saved by both
sides and compared field by field in the parent.

The batch API (tokenloom only) fills one preallocated output for many samples. Its
time is compared with a memory-bandwidth floor measured on the same machine: a
large ``numpy.copyto`` gives bytes-per-second (read + write counted), and the floor
for a batch is (token bytes read from the corpus + bytes of every output array
written) divided by that rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy

from harness import best_of, run_side
from rows import pair_row
from sides import MEGATRON, TOKENLOOM, build_gpt_dataset, describe, sample_to_numpy

N_SAVED = 16


def _fetch_side(side: str, params: dict[str, Any], probe) -> dict[str, Any]:
    desc = describe(sequence_length=params["sequence_length"], path_to_cache=params["cache"])
    ds = build_gpt_dataset(side, params["prefix"], None, desc)
    rng = numpy.random.default_rng(7)
    indices = rng.integers(0, len(ds), size=params["n_fetch"]).tolist()
    ds[indices[0]]  # first touch (lazy opens, cached masks) stays out of the timing
    if side == TOKENLOOM:  # and the kernel's load, which that touch started in a thread
        from tokenloom.kernels import KERNELS

        KERNELS.join()
    probe.imported()

    def fetch_all():
        for i in indices:  # each sample is dropped at once: no pile-up in the RSS
            ds[i]

    timing = best_of(fetch_all, repeats=7, budget_s=params["budget_s"])
    saved = {}
    for j, i in enumerate(indices[:N_SAVED]):
        for key, value in sample_to_numpy(ds[i]).items():
            saved[f"{j}.{key}"] = value
    numpy.savez(params["out"], **saved)
    timing["x_len"] = len(ds)
    if side == TOKENLOOM and params.get("batch"):
        timing.update(_batch(ds, indices, params))
    return timing


def megatron_fetch(params, probe):
    return _fetch_side(MEGATRON, params, probe)


def tokenloom_fetch(params, probe):
    return _fetch_side(TOKENLOOM, params, probe)


def _nbytes(result) -> int:
    if isinstance(result, dict):
        return sum(v.nbytes for v in result.values() if hasattr(v, "nbytes"))
    if isinstance(result, (tuple, list)):
        return sum(v.nbytes for v in result if hasattr(v, "nbytes"))
    return result.nbytes


def _batch(ds, indices: list[int], params: dict[str, Any]) -> dict[str, Any]:
    """Time ``get_batch`` over the same indices, ``batch`` samples per call, reusing ``out``."""
    if not hasattr(ds, "get_batch"):
        return {"x_batch_error": "tokenloom side not available yet: GPTDataset.get_batch missing"}
    b = params["batch"]
    chunks = [numpy.asarray(indices[k : k + b]) for k in range(0, len(indices) - b + 1, b)]
    out = ds.get_batch(chunks[0])
    first = {
        k: numpy.asarray(v)[:N_SAVED]
        for k, v in (out.items() if isinstance(out, dict) else [("tokens", out)])
    }
    numpy.savez(params["out"] + ".batch", **first)

    def call():
        for chunk in chunks:
            ds.get_batch(chunk, out=out)

    timing = best_of(call, repeats=5, budget_s=params["budget_s"])
    itemsize = numpy.dtype(ds.dataset.dtype if hasattr(ds, "dataset") else numpy.uint16).itemsize
    src = b * (params["sequence_length"] + 1) * itemsize
    return {
        "x_batch_s": timing["min_s"],
        "x_batch_samples": len(chunks) * b,
        "x_batch_per_sample_us": timing["min_s"] / (len(chunks) * b) * 1e6,
        "x_batch_bytes_per_call": src + _nbytes(out),
        "x_batch_calls": len(chunks),
    }


def copy_floor(params: dict[str, Any], probe) -> dict[str, Any]:
    """Memory bandwidth of a large numpy copy (bytes read + bytes written per second)."""
    n = params["mib"] << 20
    src = numpy.ones(n, dtype=numpy.uint8)
    dst = numpy.zeros(n, dtype=numpy.uint8)
    probe.imported()
    timing = best_of(lambda: numpy.copyto(dst, src), repeats=7, budget_s=3.0)
    return {"bandwidth_gbs": 2 * n / timing["min_s"] / 1e9, **timing}


def _compare(mc_path: str, tl_path: str) -> dict[str, Any]:
    """Every field megatron-core returns must be equal in value in tokenloom's sample."""
    mc, tl = numpy.load(mc_path), numpy.load(tl_path)
    notes = []
    for key in mc.files:
        if key not in tl.files:
            return {"equal": False, "why": f"tokenloom sample lacks field {key}"}
        if not numpy.array_equal(mc[key], tl[key]):
            return {"equal": False, "why": f"field {key} differs"}
        if mc[key].dtype != tl[key].dtype:
            notes.append(f"{key.split('.', 1)[1]}: {tl[key].dtype} vs megatron {mc[key].dtype}")
    return {"equal": True, "dtype_notes": sorted(set(notes))}


def _compare_batch(mc_path: str, batch_path: str) -> dict[str, Any]:
    mc, batch = numpy.load(mc_path), numpy.load(batch_path)
    for field in batch.files:
        for j in range(N_SAVED):
            key = f"{j}.{field}"
            if key in mc.files and not numpy.array_equal(mc[key], batch[field][j]):
                return {"batch_equal": False, "batch_why": f"batch row {j} field {field}"}
    return {"batch_equal": True, "batch_fields": batch.files}


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    from data import write_corpus

    quick = ctx["quick"]
    corpus = write_corpus(
        str(Path(ctx["data"]) / ("fetch-small" if quick else "fetch")),
        n_docs=20_000 if quick else 100_000,
        seed=11,
        median=600,
    )
    work = Path(ctx["work"]) / "fetch"
    common = dict(
        prefix=corpus["prefix"],
        sequence_length=4096,
        n_fetch=500 if quick else 2000,
        budget_s=2.0 if quick else 5.0,
        batch=64,
    )
    mc = run_side(
        "bench_fetch:megatron_fetch",
        dict(common, cache=str(work / "mc-cache"), out=str(work / "mc.npz")),
    )
    tl = run_side(
        "bench_fetch:tokenloom_fetch",
        dict(common, cache=str(work / "tl-cache"), out=str(work / "tl.npz")),
    )
    floor = run_side("bench_fetch:copy_floor", dict(mib=256 if quick else 1024))
    check = {}
    if "error" not in mc and "error" not in tl:
        check = _compare(str(work / "mc.npz"), str(work / "tl.npz"))
        if Path(str(work / "tl.npz.batch.npz")).exists():
            check.update(_compare_batch(str(work / "mc.npz"), str(work / "tl.npz.batch.npz")))
    row = pair_row(
        "2 sample fetch",
        f"{common['n_fetch']:,} random samples, seq 4096, "
        f"{corpus['tokens'] / 1e6:.0f}M-token corpus",
        mc,
        tl,
        per=common["n_fetch"],
        per_unit="sample",
        check=check,
    )
    row["bandwidth_gbs"] = floor.get("bandwidth_gbs")
    _batch_vs_floor(row)
    return [row]


def _batch_vs_floor(row: dict[str, Any]) -> None:
    """Batch time / bandwidth floor for the same bytes (target: <= 4)."""
    bw, calls = row.get("bandwidth_gbs"), row.get("tokenloom_batch_calls")
    if bw and calls and row.get("tokenloom_batch_s"):
        floor_s = calls * row["tokenloom_batch_bytes_per_call"] / (bw * 1e9)
        row["batch_floor_s"] = floor_s
        row["batch_vs_floor"] = row["tokenloom_batch_s"] / floor_s
