"""Training-loader throughput: megatron-core's path vs tokenloom's loader, same blend.

Megatron's path: a megatron-core ``BlendedDataset`` of ``GPTDataset`` (built by its
``BlendedMegatronDatasetBuilder``) in a torch ``DataLoader`` with Megatron's
pretraining sampler as ``batch_sampler`` and torch's default collate, as
``megatron/training``'s ``build_pretraining_data_loader`` makes it.  megatron-core's
wheel does not ship ``megatron/training``; its sampler is tokenloom's
``MegatronPretrainingSampler``, which yields the same index lists (238 golden cases)
and costs microseconds per batch.  tokenloom: ``build_pretraining_data_loader``.

Both sides read the same two corpora (``data.py``), sequence length 4096, micro-batch
8, no attention mask, 0 and 2 workers.  Each measurement runs in its own child process
(``harness.run_side``).  Reported: samples/s over ``--batches`` batches after the
first, for the best of ``--passes`` passes (each pass a fresh loader from sample 0 over
the same dataset, so later passes find the corpus pages mapped; the first pass, which
maps them, is reported too), time from ``iter()`` to the first batch (index caches
already built, so a warm start), and each worker's anonymous RSS (``RssAnon``: its
private heap, not the shared page cache of the mmapped corpus) after the first batches
and at the end (first pass).
The first batches of both sides are compared field by field.

    .bench-venv/bin/python benchmarks/bench_loader.py [--batches 700] [--passes 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy  # noqa: E402

from data import write_corpus  # noqa: E402
from harness import run_side  # noqa: E402
from sides import MEGATRON, TOKENLOOM, config_for, describe, gpt_classes  # noqa: E402

FIELDS = ("tokens", "labels", "loss_mask", "position_ids")
SAVED = 3


def _children_anon_kib() -> list[int]:
    """RssAnon (KiB) of this process's direct children (the DataLoader workers)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == me and "RssAnon" in fields:
            out.append(int(fields["RssAnon"].split()[0]))
    return sorted(out)


def _build_blend(side: str, params: dict[str, Any]) -> Any:
    classes = gpt_classes(side, builder=True)
    desc = describe(
        sequence_length=params["seq"],
        path_to_cache=params["cache"] + "-" + side,
        blend=[params["prefixes"], [0.6, 0.4]],
    )
    config = config_for(side, desc)
    builder = classes["BlendedMegatronDatasetBuilder"]
    return builder(classes["GPTDataset"], [params["samples"], 0, 0], lambda: True, config).build()[
        0
    ]


def _loader(side: str, dataset: Any, params: dict[str, Any]) -> Any:
    import torch

    from tokenloom.training import MegatronPretrainingSampler, build_pretraining_data_loader

    workers = params["workers"]
    if side == TOKENLOOM:
        return build_pretraining_data_loader(
            dataset,
            0,
            micro_batch_size=params["mbs"],
            num_workers=workers,
            create_attention_mask=False,
        )
    sampler = MegatronPretrainingSampler(len(dataset), 0, params["mbs"], 0, 1)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )


def _init_gloo(work: str) -> None:
    """megatron-core's BlendedDataset calls torch.distributed.get_rank() on a cache miss:
    a one-rank gloo group, as a training process has."""
    import torch.distributed as dist

    store = Path(work) / "gloo-store"
    store.unlink(missing_ok=True)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


def _timed_pass(
    iterator: Any, params: dict[str, Any], saved: dict[str, Any], memory: dict[str, list[int]]
) -> float:
    """Seconds for ``params["batches"]`` batches of ``iterator``; keeps the first batches
    in ``saved`` and the workers' memory in ``memory`` when those are empty."""
    keep, watch = not any(k.startswith("1.") for k in saved), not memory
    t1 = time.perf_counter()
    for step in range(1, params["batches"] + 1):
        batch = next(iterator)
        if keep and step < SAVED:
            saved.update({f"{step}.{k}": batch[k].numpy() for k in FIELDS})
        if watch and step == 20:
            memory["early"] = _children_anon_kib()
        if watch and step == params["batches"] // 2:
            memory["middle"] = _children_anon_kib()
    elapsed = time.perf_counter() - t1
    if watch:
        memory["late"] = _children_anon_kib()
    return elapsed


def _side(side: str, params: dict[str, Any], probe: Any) -> dict[str, Any]:
    if side == MEGATRON:
        _init_gloo(str(Path(params["out"]).parent))
    t_build = time.perf_counter()
    dataset = _build_blend(side, params)
    build_s = time.perf_counter() - t_build
    loader = _loader(side, dataset, params)
    probe.imported()
    t0 = time.perf_counter()
    iterator = iter(loader)
    first = next(iterator)
    first_s = time.perf_counter() - t0
    saved = {f"0.{k}": first[k].numpy() for k in FIELDS}
    memory: dict[str, list[int]] = {}
    passes = [_timed_pass(iterator, params, saved, memory)]
    for _ in range(1, params["passes"]):  # a fresh loader from sample 0, same dataset
        del iterator, loader
        loader = _loader(side, dataset, params)
        iterator = iter(loader)
        next(iterator)
        passes.append(_timed_pass(iterator, params, saved, memory))
    numpy.savez(params["out"], **saved)
    samples = params["batches"] * params["mbs"]
    return {
        "min_s": min(passes),
        "samples_per_s": samples / min(passes),
        "samples_per_s_first": samples / passes[0],
        "samples_per_s_passes": [samples / t for t in passes],
        "first_batch_s": first_s,
        "build_s": build_s,
        "worker_anon_mib_early": [k / 1024 for k in memory.get("early", [])],
        "worker_anon_mib_middle": [k / 1024 for k in memory.get("middle", [])],
        "worker_anon_mib_late": [k / 1024 for k in memory.get("late", [])],
        "length": len(dataset),
    }


def megatron_loader(params: dict[str, Any], probe: Any) -> dict[str, Any]:
    return _side(MEGATRON, params, probe)


def tokenloom_loader(params: dict[str, Any], probe: Any) -> dict[str, Any]:
    return _side(TOKENLOOM, params, probe)


def _equal(a: str, b: str) -> bool:
    left, right = numpy.load(a), numpy.load(b)
    return sorted(left.files) == sorted(right.files) and all(
        numpy.array_equal(left[k], right[k]) and left[k].dtype == right[k].dtype for k in left.files
    )


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--batches",
        type=int,
        default=700,
        help="timed batches per run (at most 740: one pass over 6000 samples)",
    )
    parser.add_argument(
        "--passes",
        type=int,
        default=3,
        help="timed passes per side, each by a fresh loader from sample 0 "
        "(samples/s: the best pass; the first pass is reported too)",
    )
    parser.add_argument("--data-dir", default=str(HERE / ".data" / "loader"))
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    prefixes = [
        write_corpus(f"{args.data_dir}/c{i}", 12000 - 4000 * i, 40 + i, 900.0)["prefix"]
        for i in range(2)
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlbench-loader-") as tmp:
        for workers in (0, 2):
            params = dict(
                prefixes=prefixes,
                seq=4096,
                mbs=8,
                samples=6000,
                workers=workers,
                batches=args.batches,
                passes=max(1, args.passes),
                cache=f"{args.data_dir}/cache",
            )
            reports = {}
            for side in (MEGATRON, TOKENLOOM):
                out = f"{tmp}/{side}{workers}.npz"
                reports[side] = run_side(f"bench_loader:{side}_loader", dict(params, out=out))
            ok = all(not r.get("error") for r in reports.values())
            row = {
                "workers": workers,
                **{f"{s}_{k}": v for s, r in reports.items() for k, v in r.items()},
            }
            if ok:
                row["speedup"] = (
                    reports[TOKENLOOM]["samples_per_s"] / reports[MEGATRON]["samples_per_s"]
                )
                row["speedup_first_pass"] = (
                    reports[TOKENLOOM]["samples_per_s_first"]
                    / reports[MEGATRON]["samples_per_s_first"]
                )
                row["same_batches"] = _equal(
                    f"{tmp}/{MEGATRON}{workers}.npz", f"{tmp}/{TOKENLOOM}{workers}.npz"
                )
            rows.append(row)
            _print(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _print(row: dict[str, Any]) -> None:
    if "speedup" not in row:
        print(json.dumps(row, indent=1)[:3000])
        return
    print(
        f"workers={row['workers']}: megatron {row['megatron_samples_per_s']:.0f} samples/s, "
        f"tokenloom {row['tokenloom_samples_per_s']:.0f} samples/s, "
        f"{row['speedup']:.1f}x (first pass: {row['megatron_samples_per_s_first']:.0f} vs "
        f"{row['tokenloom_samples_per_s_first']:.0f}, {row['speedup_first_pass']:.1f}x); "
        f"first batch {row['megatron_first_batch_s'] * 1e3:.0f} ms vs "
        f"{row['tokenloom_first_batch_s'] * 1e3:.0f} ms (dataset build {row['megatron_build_s']:.2f}"
        f" s vs {row['tokenloom_build_s']:.2f} s); same batches: {row['same_batches']}"
    )
    for side in (MEGATRON, TOKENLOOM):
        marks = [row[f"{side}_worker_anon_mib_{when}"] for when in ("early", "middle", "late")]
        if any(marks):
            shown = " -> ".join(str([round(x, 1) for x in mark]) for mark in marks)
            print(f"  {side} worker RssAnon MiB at batches 20 / half / end: {shown}")


if __name__ == "__main__":
    raise SystemExit(main())
