"""Target 1: the exact blending index (largest-sampling-error greedy).

Both sides get the same float64 weights (normalised lognormal) and the same size;
each writes its ``dataset_index`` / ``dataset_sample_index`` to .npy and the parent
checks they are bit-identical. megatron-core's kernel is
``helpers_cpp.build_blending_indices(dataset_index, dataset_sample_index, weights,
num_datasets, size, verbose)`` filling two preallocated arrays (int16, int64), called
exactly as ``BlendedDataset`` calls it; tokenloom's is
``tokenloom.index.build_blending_indices(weights, size)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy

from harness import best_of, run_side
from rows import pair_row


def megatron_blend(params: dict[str, Any], probe) -> dict[str, Any]:
    from megatron.core.datasets import helpers

    weights = numpy.load(params["weights"])
    size = params["size"]
    probe.imported()
    result = {}

    def call():
        dataset_index = numpy.zeros(size, dtype=numpy.int16)
        dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
        helpers.build_blending_indices(
            dataset_index, dataset_sample_index, weights, len(weights), size, False
        )
        result["out"] = (dataset_index, dataset_sample_index)

    timing = best_of(call, repeats=params["repeats"], budget_s=params["budget_s"])
    numpy.save(params["out"] + ".di.npy", result["out"][0])
    numpy.save(params["out"] + ".dsi.npy", result["out"][1])
    return timing


def tokenloom_blend(params: dict[str, Any], probe) -> dict[str, Any]:
    from tokenloom.index import build_blending_indices

    weights = numpy.load(params["weights"])
    size = params["size"]
    # same weights, fewer samples: loads (or compiles) every numba path the timed call takes
    warm = best_of(lambda: build_blending_indices(weights, min(size, 20_000)), 1)
    probe.imported()
    result = {}

    def call():
        result["out"] = build_blending_indices(weights, size)

    timing = best_of(call, repeats=params["repeats"], budget_s=params["budget_s"])
    timing["first_call_s"] = warm["min_s"]
    numpy.save(params["out"] + ".di.npy", result["out"][0])
    numpy.save(params["out"] + ".dsi.npy", result["out"][1])
    return timing


def _compare(prefix_a: str, prefix_b: str) -> dict[str, Any]:
    """Bit-identical check of both outputs; names the first differing sample if any."""
    verdict = {}
    for suffix, dtype in ((".di.npy", numpy.int16), (".dsi.npy", numpy.int64)):
        a, b = numpy.load(prefix_a + suffix), numpy.load(prefix_b + suffix)
        if a.dtype != b.dtype or a.shape != b.shape:
            return {"equal": False, "why": f"{suffix}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"}
        diff = numpy.flatnonzero(a != b)
        if diff.size:
            return {"equal": False, "why": f"{suffix} differs first at sample {diff[0]}"}
        verdict[suffix] = str(a.dtype) == numpy.dtype(dtype).name
    return {"equal": True, "dtypes_as_megatron": all(verdict.values())}


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    size = 100_000 if ctx["quick"] else 1_000_000
    rows = []
    work = Path(ctx["work"]) / "blending"
    work.mkdir(parents=True, exist_ok=True)
    for n in (16, 1024, 16384):
        w = numpy.random.default_rng(n).lognormal(0.0, 1.0, size=n)
        weights_path = str(work / f"w{n}.npy")
        numpy.save(weights_path, w / w.sum())
        common = dict(weights=weights_path, size=size, repeats=3, budget_s=3.0)
        mc = run_side("bench_blending:megatron_blend", dict(common, out=str(work / f"mc{n}")))
        tl = run_side("bench_blending:tokenloom_blend", dict(common, out=str(work / f"tl{n}")))
        check = {}
        if "error" not in mc and "error" not in tl:
            check = _compare(str(work / f"mc{n}"), str(work / f"tl{n}"))
        row = pair_row(
            "1 blending index",
            f"{n:,} datasets x {size:,} samples",
            mc,
            tl,
            per=size,
            per_unit="sample",
            check=check,
        )
        row["n_datasets"] = n
        rows.append(row)
    _growth_note(rows)
    return rows


def _growth_note(rows: list[dict[str, Any]]) -> None:
    """How per-sample cost grows from the smallest to the largest dataset count."""
    first, last = rows[0], rows[-1]
    factor = last["n_datasets"] / first["n_datasets"]
    last["datasets_factor"] = factor
    for side in ("megatron", "tokenloom"):
        a, b = first.get(f"{side}_s"), last.get(f"{side}_s")
        if a and b:
            last[f"{side}_growth"] = b / a
            last["notes"].append(f"{side}: x{b / a:.1f} time for x{factor:,.0f} datasets")
