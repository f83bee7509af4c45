"""Target 3: start-up over many prefixes, cold (no index cache) and warm (every cache present).

Each measured run is a fresh process that builds a weighted blend of N small prefixes
with ``BlendedMegatronDatasetBuilder(GPTDataset, [size, 0, 0], lambda: True,
config).build()`` and then reads the first training sample. The time covers config
construction, the build and that first sample (imports are not timed: they are
reported separately as ``import_s``). Cold runs start from an empty cache folder and
write it; warm runs reuse it.

megatron-core 0.16.1 calls ``torch.distributed.get_rank()`` when its BlendedDataset
cache misses, so its side runs inside a one-process gloo group (created before the
clock starts). tokenloom's side does not need torch.

With ``profile`` set, the run is done under cProfile with the builder's thread pool
replaced by an inline executor (cProfile sees only the calling thread) and the self
time is grouped into opens, stats, hashing, index loads, reads, ...
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from harness import run_side
from profile_summary import inline_thread_pool, summarise
from rows import pair_row
from sides import MEGATRON, TOKENLOOM, config_for, describe, gpt_classes


def _init_gloo(work: str) -> None:
    import torch.distributed as dist

    store = Path(work) / "gloo-store"
    store.unlink(missing_ok=True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


def _build_side(side: str, params: dict[str, Any], probe) -> dict[str, Any]:
    t_import = time.perf_counter()
    classes = gpt_classes(side, builder=True)
    if side == TOKENLOOM:  # import what tokenloom imports lazily, as torch is for megatron;
        # torch too: a training process has it loaded, and tokenloom asks torch.distributed
        for name in (
            "torch",
            "numba",
            "tokenloom.index",
            "tokenloom.cache",
            "tokenloom.datasets.blended",
        ):
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    import_s = time.perf_counter() - t_import
    if params.get("profile"):
        inline_thread_pool()
    if side == MEGATRON:
        _init_gloo(params["work"])
    blend = json.loads(Path(params["blend_file"]).read_text())
    probe.imported()

    def start():
        fds0 = _open_fds()
        c0 = time.process_time()  # CPU time: what a loaded machine distorts least
        t0 = time.perf_counter()
        desc = describe(
            blend=[blend["prefixes"], blend["weights"]],
            path_to_cache=params["cache"],
            split="100,0,0",
            mid_level_dataset_surplus=params.get("surplus", 0.05),
        )
        config = config_for(side, desc)
        builder = classes["BlendedMegatronDatasetBuilder"](
            classes["GPTDataset"], [params["size"], 0, 0], lambda: True, config
        )
        train = builder.build()[0]
        t1 = time.perf_counter()
        first = train[0]
        t2 = time.perf_counter()
        c2 = time.process_time()
        return {
            "min_s": t2 - t0,
            "build_s": t1 - t0,
            "first_sample_s": t2 - t1,
            "cpu_s": c2 - c0,
            "x_len": len(train),
            "x_first_tokens_sum": int(first["tokens"].sum()),
            "x_fds_per_prefix": (_open_fds() - fds0) / len(blend["prefixes"]),
        }

    if not params.get("profile"):
        result = start()
    else:
        import cProfile

        profiler = cProfile.Profile()
        result = profiler.runcall(start)
        result["profile"] = summarise(profiler)
    result["import_s"] = import_s
    return result


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def megatron_start(params, probe):
    return _build_side(MEGATRON, params, probe)


def tokenloom_start(params, probe):
    return _build_side(TOKENLOOM, params, probe)


SIDES = (
    ("megatron", "bench_warmstart:megatron_start"),
    ("tokenloom", "bench_warmstart:tokenloom_start"),
)


def _measure(
    n: int, ctx: dict[str, Any], blend_file: str, sides, warm_runs: int, fds: dict[str, float]
) -> dict:
    """Cold then warm, ``warm_runs`` times each per side (the best run of each counts);
    returns {side: {cold, warm}}.

    A side whose open descriptors per prefix (measured at the first count) would pass
    this machine's open-file limit at ``n`` prefixes is skipped with that reason.
    """
    work = Path(ctx["work"]) / "warmstart"
    out = {}
    limit = open_file_limit()
    for name, target in sides:
        need = fds.get(name, 0) * n + 64
        if need > limit:
            why = {
                "error": f"skipped: needs about {need:,.0f} open files ({fds[name]:.1f} per "
                f"prefix, measured at the smaller count), limit here {limit:,}"
            }
            out[name] = {"cold": why, "warm": why}
            continue
        cache = work / f"cache-{name}-{n}"
        params = dict(blend_file=blend_file, cache=str(cache), size=10 * n, work=str(work))
        colds = []
        for _ in range(warm_runs):  # each cold run starts from an empty cache folder
            shutil.rmtree(cache, ignore_errors=True)
            colds.append(run_side(target, params))
        ok_cold = [c for c in colds if "error" not in c]
        cold = min(ok_cold, key=lambda c: c["min_s"]) if ok_cold else colds[0]
        if ok_cold:
            cold["runs"] = len(ok_cold)
        warms = [run_side(target, params) for _ in range(warm_runs)]
        ok = [w for w in warms if "error" not in w]
        warm = min(ok, key=lambda w: w["min_s"]) if ok else warms[0]
        if ok:
            warm["runs"] = len(ok)
        out[name] = {"cold": cold, "warm": warm}
        if ctx.get("profile") and "error" not in cold:
            warm_prof = run_side(target, dict(params, profile=True))
            cold_cache = work / f"cache-{name}-{n}-profile"
            shutil.rmtree(cold_cache, ignore_errors=True)
            cold_prof = run_side(target, dict(params, profile=True, cache=str(cold_cache)))
            shutil.rmtree(cold_cache, ignore_errors=True)
            out[name]["profile"] = {
                "warm": warm_prof.get("profile"),
                "cold": cold_prof.get("profile"),
            }
    return out


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    from data import blend_weights, write_many

    quick = ctx["quick"]
    counts = [100, 400] if quick else [1000, 3000, 10000]
    prefixes = write_many(
        str(Path(ctx["data"]) / "many"), max(counts), docs_per_prefix=40, seed=100, median=300
    )
    work = Path(ctx["work"]) / "warmstart"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    fds: dict[str, float] = {}
    for k, n in enumerate(counts):
        blend_file = work / f"blend-{n}.json"
        blend_file.write_text(
            json.dumps({"prefixes": prefixes[:n], "weights": blend_weights(n, seed=n)})
        )
        sides = SIDES if (k == 0 or ctx.get("megatron_at_scale", True)) else SIDES[1:]
        res = _measure(
            n,
            dict(ctx, profile=ctx.get("profile", True) and k == 0),
            str(blend_file),
            sides,
            warm_runs=2 if k == 0 else 1,
            fds=fds,
        )
        for name in res:
            per = res[name]["warm"].get("x_fds_per_prefix")
            if per is not None and name not in fds:
                fds[name] = per
        mc = res.get("megatron", {"cold": {"error": "skipped"}, "warm": {"error": "skipped"}})
        tl = res["tokenloom"]
        for phase in ("warm", "cold"):
            row = pair_row(
                "3 warm start" if phase == "warm" else "3 cold start",
                f"{n:,} prefixes, {phase}, build + first sample",
                mc[phase],
                tl[phase],
            )
            for side, rep in (("megatron", mc[phase]), ("tokenloom", tl[phase])):
                for key in ("build_s", "first_sample_s", "cpu_s", "import_s"):
                    if key in rep:
                        row[f"{side}_{key}"] = rep[key]
            row["n_prefixes"] = n
            row["profiles"] = {
                s: res[s]["profile"][phase]
                for s in res
                if res[s].get("profile") and res[s]["profile"].get(phase)
            }
            if rep_equal(mc[phase], tl[phase]) is not None:
                row["equal"] = rep_equal(mc[phase], tl[phase])
            rows.append(row)
    return rows


def open_file_limit() -> int:
    """The open-file limit a child gets (worker.py raises it as far as allowed)."""
    from worker import raise_open_file_limit

    return raise_open_file_limit()


def rep_equal(mc: dict, tl: dict):
    """Same blend length and same first sample (token sum) on both sides, when both ran."""
    if "error" in mc or "error" in tl:
        return None
    return mc.get("x_len") == tl.get("x_len") and mc.get("x_first_tokens_sum") == tl.get(
        "x_first_tokens_sum"
    )
