"""One measured side of the storage benchmark, run in its own process.

``python benchmarks/storage_cases.py '<json spec>'`` opens the data as the spec says
(local mmap, or s3:// / msc:// through tokenloom or megatron-core), runs one access
pattern for at most ``n`` samples or ``budget_s`` seconds, and prints one JSON line:
samples/s, the time to open, and the bytes tokenloom's readers fetched.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MIB = 1024 * 1024


def _storage_config(spec: dict[str, Any]) -> Any:
    if spec["side"] == "megatron":
        from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

        return ObjectStorageConfig(path_to_idx_cache=spec["idx_cache"])  # its defaults
    from tokenloom.storage import ObjectStorageConfig

    return ObjectStorageConfig(
        path_to_idx_cache=spec["idx_cache"],
        bin_chunk_nbytes=int(spec.get("chunk") or 256 * MIB),
        max_cached_chunks=int(spec.get("cached", 1)),
        read_ahead_chunks=int(spec.get("read_ahead", 0)),
    )


def _indexed(spec: dict[str, Any], prefix: str) -> Any:
    if spec["side"] == "megatron":
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    else:
        from tokenloom.format import IndexedDataset
    if spec["store"] == "local":
        return IndexedDataset(prefix, mmap=True)
    return IndexedDataset(prefix, mmap=False, object_storage_config=_storage_config(spec))


def _builder_datasets(spec: dict[str, Any]) -> Any:
    from sides import config_for, describe, gpt_classes

    side = spec["side"]
    prefixes: list[str] = spec["prefixes"]
    blend = [prefixes, spec.get("weights")] if len(prefixes) > 1 else [prefixes, None]
    extra: dict[str, Any] = {}
    if spec["store"] != "local":
        extra = dict(object_storage_cache_path=spec["idx_cache"], mmap_bin_files=False)
        if side == "tokenloom":
            extra["object_storage_config"] = _storage_config(spec)
    desc = describe(blend=blend, path_to_cache=spec["index_cache"], **extra)
    if side == "megatron":  # its BlendedDataset asks torch.distributed for the rank
        import torch.distributed as dist

        if not dist.is_initialized():
            Path(spec["index_cache"]).mkdir(parents=True, exist_ok=True)
            dist.init_process_group(
                "gloo", init_method=f"file://{spec['index_cache']}/rdzv", rank=0, world_size=1
            )
    classes = gpt_classes(side, builder=True)
    config = config_for(side, desc)
    builder = classes["BlendedMegatronDatasetBuilder"](
        classes["GPTDataset"], [int(spec["n"]), 0, 0], lambda: True, config
    )
    return builder.build()[0]


def _open(spec: dict[str, Any]) -> Callable[[int], Any]:
    workload = spec["workload"]
    if workload in ("gpt", "blend"):
        dataset = _builder_datasets(spec)
        return lambda k: dataset[k]
    dataset = _indexed(spec, spec["prefixes"][0])
    count = len(dataset)
    rng = numpy.random.default_rng(int(spec.get("seed", 0)))
    if workload == "docs-random":
        order = rng.integers(0, count, int(spec["n"]))
    else:  # docs-sequential from a random start
        start = int(rng.integers(0, max(1, count - int(spec["n"]))))
        order = numpy.arange(start, min(count, start + int(spec["n"])))
    spec["_dataset"] = dataset
    return lambda k: dataset[int(order[k])]


def _fetched(spec: dict[str, Any]) -> Any:
    dataset = spec.get("_dataset")
    stats = getattr(getattr(dataset, "bin_reader", None), "stats", None)
    return None if stats is None else stats.bytes_fetched


def run(spec: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    fetch = _open(spec)
    opened = time.perf_counter() - started
    n, budget = int(spec["n"]), float(spec["budget_s"])
    done, t0 = 0, time.perf_counter()
    while done < n and time.perf_counter() - t0 < budget:
        fetch(done)
        done += 1
    elapsed = time.perf_counter() - t0
    return {
        "samples": done,
        "seconds": round(elapsed, 3),
        "samples_per_s": round(done / elapsed, 2) if elapsed else None,
        "open_s": round(opened, 3),
        "bytes_fetched": _fetched(spec),
    }


if __name__ == "__main__":
    result = run(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
